// fx export of the linalg and nn families (core/ops/linalg*.cpp, nn*.cpp,
// norm_grad.cpp): matmul, linear, convolution, pooling, normalization,
// embedding, dropout and softmax, with their backward ops.
//
// Kiln's backward ops recompute from the forward input what PyTorch saves
// (max-pool indices, norm mean and inverse std), so the aten backward ops
// get the same things recomputed by the aten forward (max_pool2d_with_indices,
// native_*_norm without affine parameters). Where aten reads a tensor only
// for its shape (convolution_backward's unused operand, avg_pool2d_backward's
// input) a zeros tensor of that shape stands in.
//
// Training batch_norm's running statistics are not taken from
// native_batch_norm, which would update its running-stat inputs in place:
// they are computed functionally, as Kiln's kernel does,
// new = (1 - momentum) * old + momentum * batch (unbiased variance).
// Dropout is exported only when it draws nothing (p = 0 or eval): Kiln's
// random stream has no PyTorch equivalent.
#include <algorithm>
#include <functional>
#include <numeric>

#include "core/export/fx_python_ops.h"
#include "core/ops/op_helpers.h"

namespace kiln::fx {
namespace {

std::string ints(const Node& n, const char* attr) {
  return pyInts(pair(n, attr));
}

/// Input i, or "None" when the node has no input i (optional biases).
std::string optionalIn(Emitter& e, const Node& n, size_t i) {
  return i < n.numInputs() ? e.in(n, i) : "None";
}

std::string zerosLike(Emitter& e, const std::string& like, const std::vector<int64_t>& shape) {
  return e.call("aten.new_zeros.default", {like, pyInts(shape)});
}

void setOuts(Emitter& e, const Node& n, const std::string& tuple) {
  for (size_t i = 0; i < n.numOutputs(); ++i) e.setOut(n, i, e.item(tuple, static_cast<int64_t>(i)));
}

// ---- linalg -------------------------------------------------------------------------

void emitMatmul(Emitter& e, const Node& n) {
  e.setOut(n, 0, e.call("aten.matmul.default", {e.in(n, 0), e.in(n, 1)}));
}

/// gemm: matmul of the operands, each transposed first where its flag says.
void emitGemm(Emitter& e, const Node& n) {
  auto operand = [&](size_t i, const char* flag) {
    const std::string x = e.in(n, i);
    return n.i(flag) ? e.call("aten.transpose.int", {x, "-2", "-1"}) : x;
  };
  e.setOut(n, 0, e.call("aten.matmul.default", {operand(0, "trans_a"), operand(1, "trans_b")}));
}

/// linear and its epilogues: activation, then the residual add (which
/// promotes a bf16 GEMM to an f32 residual's dtype, as Kiln's epilogue does).
void emitLinear(Emitter& e, const Node& n) {
  const Value* bias = linearBias(n);
  std::string y = e.call("aten.linear.default", {e.in(n, 0), e.in(n, 1), bias ? e.in(n, 2) : "None"});
  const std::string& act = n.s("activation");
  if (act == "relu")
    y = e.call("aten.relu.default", {y});
  else if (act != "none")
    refuse(n, "unknown activation epilogue '" + act + "'");
  if (linearResidual(n)) y = e.call("aten.add.Tensor", {y, e.in(n, n.numInputs() - 1)});
  e.setOut(n, 0, y);
}

// ---- convolution --------------------------------------------------------------------

/// stride, padding, dilation, transposed, output_padding, groups: the tail
/// aten.convolution and convolution_backward share.
std::vector<std::string> convArgs(const Node& n) {
  return {ints(n, "stride"), ints(n, "padding"), ints(n, "dilation"), "False", "[0, 0]", pyInt(n.i("groups"))};
}

/// Activation operand i of a convolution node in NCHW: channels_last nodes
/// (passes/channels_last.cpp) hold NHWC tensors, which aten reads permuted.
std::string nchwIn(Emitter& e, const Node& n, size_t i) {
  return channelsLast(n) ? e.call("aten.permute.default", {e.in(n, i), "[0, 3, 1, 2]"}) : e.in(n, i);
}
/// A convolution's NCHW activation result in the node's layout.
std::string inLayout(Emitter& e, const Node& n, const std::string& y) {
  return channelsLast(n) ? e.call("aten.permute.default", {y, "[0, 2, 3, 1]"}) : y;
}

void emitConv2d(Emitter& e, const Node& n) {
  std::vector<std::string> args = {nchwIn(e, n, 0), e.in(n, 1), optionalIn(e, n, 2)};
  for (std::string& a : convArgs(n)) args.push_back(std::move(a));
  e.setOut(n, 0, inLayout(e, n, e.call("aten.convolution.default", args)));
}

/// convolution_backward for one of its outputs (0: input, 1: weight).
std::string convBackward(Emitter& e, const Node& n, const std::string& input, const std::string& weight, int which) {
  std::vector<std::string> args = {nchwIn(e, n, 0), input, weight, "None"};
  for (std::string& a : convArgs(n)) args.push_back(std::move(a));
  args.push_back(which == 0 ? "[True, False, False]" : "[False, True, False]");
  return e.item(e.call("aten.convolution_backward.default", args), which);
}

void emitConvInputBackward(Emitter& e, const Node& n) {
  const Shape shape = n.is("input_shape");
  const std::string input = zerosLike(e, e.in(n, 0), channelsLast(n) ? nchwFromNhwc(shape) : shape);
  e.setOut(n, 0, inLayout(e, n, convBackward(e, n, input, e.in(n, 1), 0)));
}

void emitConvWeightBackward(Emitter& e, const Node& n) {
  e.setOut(n, 0, convBackward(e, n, nchwIn(e, n, 1), zerosLike(e, e.in(n, 0), n.is("weight_shape")), 1));
}

// ---- pooling ------------------------------------------------------------------------

/// kernel_size, stride (empty: the kernel), padding.
std::vector<std::string> windowArgs(const Node& n) {
  return {ints(n, "kernel_size"), pyInts(n.is("stride").empty() ? pair(n, "kernel_size") : pair(n, "stride")),
          ints(n, "padding")};
}

std::vector<std::string> maxPoolArgs(const Node& n, const std::string& x) {
  std::vector<std::string> args = {x};
  for (std::string& a : windowArgs(n)) args.push_back(std::move(a));
  args.push_back(ints(n, "dilation"));
  args.push_back(pyBool(n.i("ceil_mode") != 0));
  return args;
}

void emitMaxPool(Emitter& e, const Node& n) {
  e.setOut(n, 0, e.item(e.call("aten.max_pool2d_with_indices.default", maxPoolArgs(n, e.in(n, 0))), 0));
}

void emitMaxPoolBackward(Emitter& e, const Node& n) {
  std::string indices = e.item(e.call("aten.max_pool2d_with_indices.default", maxPoolArgs(n, e.in(n, 1))), 1);
  std::vector<std::string> args = maxPoolArgs(n, e.in(n, 1));
  args.insert(args.begin(), e.in(n, 0));
  args.push_back(indices);
  e.setOut(n, 0, e.call("aten.max_pool2d_with_indices_backward.default", args));
}

std::vector<std::string> avgPoolArgs(const Node& n) {
  std::vector<std::string> args = windowArgs(n);
  args.push_back(pyBool(n.i("ceil_mode") != 0));
  args.push_back(pyBool(n.i("count_include_pad") != 0));
  args.push_back(n.i("divisor_override") ? pyInt(n.i("divisor_override")) : "None");
  return args;
}

void emitAvgPool(Emitter& e, const Node& n) {
  std::vector<std::string> args = avgPoolArgs(n);
  args.insert(args.begin(), e.in(n, 0));
  e.setOut(n, 0, e.call("aten.avg_pool2d.default", args));
}

void emitAvgPoolBackward(Emitter& e, const Node& n) {
  std::vector<std::string> args = avgPoolArgs(n);
  args.insert(args.begin(), {e.in(n, 0), zerosLike(e, e.in(n, 0), n.is("input_shape"))});
  e.setOut(n, 0, e.call("aten.avg_pool2d_backward.default", args));
}

void emitAdaptiveAvgPool(Emitter& e, const Node& n) {
  e.setOut(n, 0, e.call("aten._adaptive_avg_pool2d.default", {e.in(n, 0), ints(n, "output_size")}));
}

void emitAdaptiveAvgPoolBackward(Emitter& e, const Node& n) {
  e.setOut(n, 0,
           e.call("aten._adaptive_avg_pool2d_backward.default",
                  {e.in(n, 0), zerosLike(e, e.in(n, 0), n.is("input_shape"))}));
}

void emitAdaptiveMaxPool(Emitter& e, const Node& n) {
  e.setOut(n, 0, e.item(e.call("aten.adaptive_max_pool2d.default", {e.in(n, 0), ints(n, "output_size")}), 0));
}

void emitAdaptiveMaxPoolBackward(Emitter& e, const Node& n) {
  const Shape& g = n.input(0)->shape();  // the forward's output: its last two dims are the output size
  std::string size = pyInts({g[g.size() - 2], g.back()});
  std::string indices = e.item(e.call("aten.adaptive_max_pool2d.default", {e.in(n, 1), size}), 1);
  e.setOut(n, 0, e.call("aten.adaptive_max_pool2d_backward.default", {e.in(n, 0), e.in(n, 1), indices}));
}

// ---- normalization ------------------------------------------------------------------

/// Every dim of x but the channels (dim 1): what batch norm reduces over.
std::vector<int64_t> batchAxes(const Value* x) {
  std::vector<int64_t> axes{0};
  for (int64_t d = 2; d < x->type().rank(); ++d) axes.push_back(d);
  return axes;
}

void emitBatchNorm(Emitter& e, const Node& n) {
  const bool training = n.i("training") != 0;
  const std::string eps = pyFloat(n.f("eps")), momentum = pyFloat(n.f("momentum"));
  if (!training) {  // running stats in, nothing updated
    std::string r = e.call("aten.native_batch_norm.default",
                           {e.in(n, 0), e.in(n, 1), e.in(n, 2), e.in(n, 3), e.in(n, 4), "False", momentum, eps});
    return e.setOut(n, 0, e.item(r, 0));
  }
  // No running stats passed: aten then normalizes with the batch's and mutates nothing.
  std::string r = e.call("aten.native_batch_norm.default",
                         {e.in(n, 0), e.in(n, 1), e.in(n, 2), "None", "None", "True", momentum, eps});
  e.setOut(n, 0, e.item(r, 0));
  // Kiln's kernel takes the batch moments and the update in double, then
  // rounds once to the stats' dtype: the same here.
  const double m = n.f("momentum");
  const std::string axes = pyInts(batchAxes(n.input(0)));
  const std::string x = e.cast(e.in(n, 0), n.input(0)->dtype(), DType::F64);
  std::string mean = e.call("aten.mean.dim", {x, axes, "False"});
  std::string var = e.call("aten.var.correction", {x, axes}, {"correction=1", "keepdim=False"});
  auto update = [&](size_t in, const std::string& batch) {  // (1 - m) * old + m * batch
    const DType t = n.input(in)->dtype();
    std::string old = e.cast(e.in(n, in), t, DType::F64);
    std::string r = e.call("aten.add.Tensor", {e.call("aten.mul.Scalar", {old, pyFloat(1 - m)}),
                                               e.call("aten.mul.Scalar", {batch, momentum})});
    return e.cast(r, DType::F64, t);
  };
  e.setOut(n, 1, update(3, mean));
  e.setOut(n, 2, update(4, var));
}

void emitBatchNormBackward(Emitter& e, const Node& n) {
  const std::string eps = pyFloat(n.f("eps"));
  const std::string mask = "[True, True, True]";
  if (n.i("training")) {  // batch statistics, recomputed by the forward without affine parameters
    std::string fwd =
        e.call("aten.native_batch_norm.default", {e.in(n, 1), "None", "None", "None", "None", "True", "0.0", eps});
    std::string r =
        e.call("aten.native_batch_norm_backward.default",
               {e.in(n, 0), e.in(n, 1), e.in(n, 2), "None", "None", e.item(fwd, 1), e.item(fwd, 2), "True", eps, mask});
    return setOuts(e, n, r);
  }
  std::string r = e.call("aten.native_batch_norm_backward.default", {e.in(n, 0), e.in(n, 1), e.in(n, 2), e.in(n, 3),
                                                                     e.in(n, 4), "None", "None", "False", eps, mask});
  setOuts(e, n, r);
}

void emitLayerNorm(Emitter& e, const Node& n) {
  std::string r = e.call("aten.native_layer_norm.default",
                         {e.in(n, 0), pyInts(n.is("normalized_shape")), e.in(n, 1), e.in(n, 2), pyFloat(n.f("eps"))});
  e.setOut(n, 0, e.item(r, 0));
}

void emitLayerNormBackward(Emitter& e, const Node& n) {
  const std::string ns = pyInts(n.is("normalized_shape"));
  std::string fwd = e.call("aten.native_layer_norm.default", {e.in(n, 1), ns, "None", "None", pyFloat(n.f("eps"))});
  // aten reads `bias` only for grad_bias's shape and dtype: the weight's.
  std::string r = e.call(
      "aten.native_layer_norm_backward.default",
      {e.in(n, 0), e.in(n, 1), ns, e.item(fwd, 1), e.item(fwd, 2), e.in(n, 2), e.in(n, 2), "[True, True, True]"});
  setOuts(e, n, r);
}

/// N, C, HxW, group: native_group_norm's geometry arguments.
std::vector<std::string> groupGeometry(const Node& n, const Value* x) {
  const Shape& s = x->shape();
  const int64_t c = channelsOf(n, s);
  const int64_t hw = s[0] > 0 && c > 0 ? numelOf(s) / (s[0] * c) : 0;
  return {pyInt(s[0]), pyInt(c), pyInt(hw), pyInt(n.i("num_groups"))};
}

/// A channels_last group norm's [N, S..., C] operand as the [N, C, S...]
/// tensor aten normalizes (to_nchw), or aten's result back (!to_nchw).
/// Operands are copied contiguous: given channels-last strides, libtorch
/// 1.13's native_group_norm_backward returns wrong gradients.
std::string groupNormLayout(Emitter& e, const Node& n, const std::string& v, size_t rank, bool to_nchw) {
  if (!channelsLast(n)) return v;
  std::vector<int64_t> dims(rank);
  std::iota(dims.begin(), dims.end(), int64_t{0});
  if (to_nchw)
    std::rotate(dims.begin() + 1, dims.end() - 1, dims.end());  // [0, r-1, 1, ..., r-2]
  else
    std::rotate(dims.begin() + 1, dims.begin() + 2, dims.end());  // [0, 2, ..., r-1, 1]
  const std::string p = e.call("aten.permute.default", {v, pyInts(dims)});
  return to_nchw ? e.call("aten.clone.default", {p}, {"memory_format=torch.contiguous_format"}) : p;
}

void emitGroupNorm(Emitter& e, const Node& n) {
  const size_t rank = n.input(0)->shape().size();
  std::vector<std::string> args = {groupNormLayout(e, n, e.in(n, 0), rank, true), e.in(n, 1), e.in(n, 2)};
  for (std::string& a : groupGeometry(n, n.input(0))) args.push_back(std::move(a));
  args.push_back(pyFloat(n.f("eps")));
  e.setOut(n, 0, groupNormLayout(e, n, e.item(e.call("aten.native_group_norm.default", args), 0), rank, false));
}

void emitGroupNormBackward(Emitter& e, const Node& n) {
  const size_t rank = n.input(1)->shape().size();
  const std::vector<std::string> geo = groupGeometry(n, n.input(1));
  const std::string x = groupNormLayout(e, n, e.in(n, 1), rank, true);
  std::vector<std::string> args = {x, "None", "None"};
  args.insert(args.end(), geo.begin(), geo.end());
  args.push_back(pyFloat(n.f("eps")));
  std::string fwd = e.call("aten.native_group_norm.default", args);
  std::vector<std::string> bw = {groupNormLayout(e, n, e.in(n, 0), rank, true), x, e.item(fwd, 1), e.item(fwd, 2),
                                 e.in(n, 2)};
  bw.insert(bw.end(), geo.begin(), geo.end());
  bw.push_back("[True, True, True]");
  const std::string r = e.call("aten.native_group_norm_backward.default", bw);
  if (!channelsLast(n)) return setOuts(e, n, r);
  e.setOut(n, 0, groupNormLayout(e, n, e.item(r, 0), rank, false));
  e.setOut(n, 1, e.item(r, 1));
  e.setOut(n, 2, e.item(r, 2));
}

// ---- embedding, dropout, softmax ----------------------------------------------------

void emitEmbedding(Emitter& e, const Node& n) {
  e.setOut(n, 0,
           e.call("aten.embedding.default", {e.in(n, 0), e.in(n, 1), pyInt(n.i("padding_idx")),
                                             pyBool(n.i("scale_grad_by_freq") != 0), "False"}));
}

void emitEmbeddingBackward(Emitter& e, const Node& n) {
  e.setOut(n, 0,
           e.call("aten.embedding_dense_backward.default",
                  {e.in(n, 0), e.in(n, 1), pyInt(n.i("num_weights")), pyInt(n.i("padding_idx")),
                   pyBool(n.i("scale_grad_by_freq") != 0)}));
}

void emitDropout(Emitter& e, const Node& n) {
  const bool training = n.i("training") != 0;
  if (training && n.f("p") != 0)
    refuse(n,
           "dropout with p > 0 draws from Kiln's random stream, which PyTorch cannot reproduce; export with "
           "dropout off (p = 0) or in eval mode");
  e.setOut(n, 0, e.in(n, 0));  // keeps everything, scale 1
  if (training)
    e.setOut(n, 1,
             e.call("aten.full.default", {pyInts({n.input(0)->shape().begin(), n.input(0)->shape().end()}), "True"},
                    {"dtype=torch.bool", "device=device"}));
}

void emitSoftmax(Emitter& e, const Node& n) {
  const char* target = n.is(Op::softmax) ? "aten._softmax.default" : "aten._log_softmax.default";
  e.setOut(n, 0, e.call(target, {e.in(n, 0), pyInt(n.i("dim")), "False"}));
}

void emitSoftmaxBackward(Emitter& e, const Node& n) {
  const char* target =
      n.is(Op::softmax_backward) ? "aten._softmax_backward_data.default" : "aten._log_softmax_backward_data.default";
  e.setOut(n, 0, e.call(target, {e.in(n, 0), e.in(n, 1), pyInt(n.i("dim")), pyDType(n.input(1)->dtype())}));
}

}  // namespace

void addNNEmitters(EmitTable& t) {
  t["matmul"] = emitMatmul;
  t["gemm"] = emitGemm;
  t["linear"] = emitLinear;
  t["conv2d"] = emitConv2d;
  t["conv2d_input_backward"] = emitConvInputBackward;
  t["conv2d_weight_backward"] = emitConvWeightBackward;
  t["max_pool2d"] = emitMaxPool;
  t["max_pool2d_backward"] = emitMaxPoolBackward;
  t["avg_pool2d"] = emitAvgPool;
  t["avg_pool2d_backward"] = emitAvgPoolBackward;
  t["adaptive_avg_pool2d"] = emitAdaptiveAvgPool;
  t["adaptive_avg_pool2d_backward"] = emitAdaptiveAvgPoolBackward;
  t["adaptive_max_pool2d"] = emitAdaptiveMaxPool;
  t["adaptive_max_pool2d_backward"] = emitAdaptiveMaxPoolBackward;
  t["batch_norm"] = emitBatchNorm;
  t["batch_norm_backward"] = emitBatchNormBackward;
  t["layer_norm"] = emitLayerNorm;
  t["layer_norm_backward"] = emitLayerNormBackward;
  t["group_norm"] = emitGroupNorm;
  t["group_norm_backward"] = emitGroupNormBackward;
  t["embedding"] = emitEmbedding;
  t["embedding_backward"] = emitEmbeddingBackward;
  t["dropout"] = emitDropout;
  t["softmax"] = emitSoftmax;
  t["log_softmax"] = emitSoftmax;
  t["softmax_backward"] = emitSoftmaxBackward;
  t["log_softmax_backward"] = emitSoftmaxBackward;
}

}  // namespace kiln::fx
