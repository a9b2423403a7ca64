// Gradient rules for the normalization part of the nn family (see
// core/grad.h): batch_norm, layer_norm, group_norm, softmax, log_softmax.
// Formulas are PyTorch's CPU backward kernels (batch_norm_cpu_backward,
// LayerNormBackwardKernel, GroupNormBackwardKernel, softmax_backward_data).
//
// Each norm backward is one fused op with CPU kernels in
// backend/cpu/kernels_norm_grad.cpp:
//   batch_norm_backward(g, x, weight[, running_mean, running_var]) {training, eps}
//   layer_norm_backward(g, x, weight) {normalized_shape, eps}
//   group_norm_backward(g, x, weight) {num_groups, eps}
//     -> (grad_x, grad_weight, grad_bias)
// They recompute mean and inverse std from x instead of saving them from the
// forward: the forward ops keep their outputs (importers and kernels stay as
// they are) and the recomputation costs one read of x, which the backward
// reads anyway. Training batch_norm takes no running stats (it normalizes
// with the biased batch variance); eval batch_norm takes them and nothing is
// computed from the batch. The running-stat outputs of training batch_norm
// and the running-stat inputs get no gradient, as in PyTorch. All three
// outputs are always computed: grad_weight/grad_bias are by-products of the
// sums grad_x needs (batch norm) or one extra pass; unused ones are simply
// not consumed.
//   softmax_backward(g, y) {dim}:     y * (g - sum(g * y, dim))
//   log_softmax_backward(g, y) {dim}: g - exp(y) * sum(g, dim)
// read the forward output, so x can die after the forward.
#include "core/grad.h"
#include "core/ops/op_helpers.h"

namespace kiln {
namespace {

/// g and x: one floating type (g is dL/dy and y has x's type).
void requireGradLikeInput(const Node& n) {
  const TensorType& g = n.input(0)->type();
  const TensorType& x = n.input(1)->type();
  if (!isFloating(x.dtype) || g != x)
    opFail(n, "gradient " + g.str() + " and input " + x.str() + " must be the same floating type");
}

void requireChannelVector(const Node& n, size_t i, int64_t channels, const char* what) {
  const TensorType& t = n.input(i)->type();
  if (!isFloating(t.dtype) || t.shape != Shape{channels})
    opFail(n, std::string(what) + " " + t.str() + " must be a floating vector of " + std::to_string(channels) +
                  " channels");
}

/// (grad_x, grad_weight, grad_bias): x's type, then weight's type twice.
std::vector<TensorType> normGradTypes(const Node& n) {
  return {n.input(1)->type(), n.input(2)->type(), n.input(2)->type()};
}

std::vector<TensorType> inferBatchNormBackward(const Node& n) {
  requireGradLikeInput(n);
  const TensorType& x = n.input(1)->type();
  if (x.rank() < 2) opFail(n, "input must have at least 2 dims, got " + x.str());
  const bool training = n.i("training") != 0;
  // Training normalizes with the batch statistics; eval with the running ones.
  const size_t want = training ? 3 : 5;
  if (n.numInputs() != want)
    opFail(n, std::string(training ? "training" : "eval") + " mode takes " + std::to_string(want) +
                  " inputs (g, x, weight" + (training ? "" : ", running_mean, running_var") + "), got " +
                  std::to_string(n.numInputs()));
  requireChannelVector(n, 2, x.shape[1], "weight");
  if (!training) {
    requireChannelVector(n, 3, x.shape[1], "running_mean");
    requireChannelVector(n, 4, x.shape[1], "running_var");
  }
  return normGradTypes(n);
}

std::vector<TensorType> inferLayerNormBackward(const Node& n) {
  requireGradLikeInput(n);
  const TensorType& x = n.input(1)->type();
  const auto& ns = n.is("normalized_shape");
  if (ns.size() > x.shape.size() || !std::equal(ns.begin(), ns.end(), x.shape.end() - static_cast<long>(ns.size())))
    opFail(n, "normalized_shape " + shapeStr(ns) + " does not match the end of " + x.str());
  const TensorType& w = n.input(2)->type();
  if (!isFloating(w.dtype) || w.shape != ns)
    opFail(n, "weight " + w.str() + " must be floating with shape " + shapeStr(ns));
  return normGradTypes(n);
}

std::vector<TensorType> inferGroupNormBackward(const Node& n) {
  requireGradLikeInput(n);
  const TensorType& x = n.input(1)->type();
  const int64_t groups = n.i("num_groups");
  if (x.rank() < 2 || groups <= 0 || channelsOf(n, x.shape) % groups)
    opFail(n, "channels of " + x.str() + " are not divisible into " + std::to_string(groups) + " groups");
  requireChannelVector(n, 2, channelsOf(n, x.shape), "weight");
  return normGradTypes(n);
}

std::vector<TensorType> inferSoftmaxBackward(const Node& n) {
  requireGradLikeInput(n);
  normalizeAxis(n.i("dim"), n.input(1)->type().rank());
  return {n.input(0)->type()};
}

/// About a dozen flops per element of x (two passes: sums, then grad_x).
Cost normBackwardCost(const Node& n) {
  return {12.0 * static_cast<double>(n.input(1)->type().numel()), ioBytes(n)};
}

/// The forward node's attributes with defaults resolved, so the backward
/// kernel sees exactly what the forward used.
AttrMap forwardAttrs(GradContext& c, std::initializer_list<const char*> names) {
  AttrMap a;
  for (const char* name : names) a[name] = *c.node().attr(name);
  return a;
}

/// Emits `op` and hands its three outputs to inputs x, weight, bias.
void fusedNormGrad(GradContext& c, const char* op, std::vector<Value*> extra, AttrMap attrs) {
  if (!c.grad(0)) return;  // only running-stat outputs reached the loss: they carry none
  if (!c.needs(0) && !c.needs(1) && !c.needs(2)) return;
  std::vector<Value*> ins = {c.castTo(c.grad(0), c.in(0)->dtype()), c.in(0), c.in(1)};
  ins.insert(ins.end(), extra.begin(), extra.end());
  Node* b = c.opNode(op, std::move(ins), std::move(attrs));
  for (size_t i = 0; i < 3; ++i) c.setGrad(i, b->output(i));
}

void batchNormGrad(GradContext& c) {
  const bool training = c.node().i("training") != 0;
  std::vector<Value*> running;
  if (!training) running = {c.in(3), c.in(4)};
  fusedNormGrad(c, "batch_norm_backward", std::move(running), forwardAttrs(c, {"training", "eps"}));
}

void layerNormGrad(GradContext& c) {
  fusedNormGrad(c, "layer_norm_backward", {}, forwardAttrs(c, {"normalized_shape", "eps"}));
}

void groupNormGrad(GradContext& c) {
  AttrMap a = forwardAttrs(c, {"num_groups", "eps"});
  if (channelsLast(c.node())) a["channels_last"] = int64_t{1};
  fusedNormGrad(c, "group_norm_backward", {}, std::move(a));
}

/// softmax_backward / log_softmax_backward on the forward output.
void softmaxGrad(GradContext& c) {
  const std::string op = c.node().op() + "_backward";
  Value* y = c.out();
  c.setGrad(0, c.op(op, {c.castTo(c.grad(), y->dtype()), y}, {{"dim", c.node().i("dim")}}));
}

}  // namespace

void registerNormGrads(OpTable& t) {
  const auto eps = optAttr("eps", 1e-5);
  t.add({"batch_norm_backward",
         "(g, x, weight[, running_mean, running_var]) -> (grad_x, grad_weight, grad_bias); batch stats when training",
         3,
         5,
         kOutput0OverInput,
         {optAttr("training", int64_t{0}), eps},
         inferBatchNormBackward,
         normBackwardCost});
  t.add({"layer_norm_backward",
         "(g, x, weight) -> (grad_x, grad_weight, grad_bias) over normalized_shape",
         3,
         3,
         0,
         {reqAttr("normalized_shape", AttrKind::Ints), eps},
         inferLayerNormBackward,
         normBackwardCost});
  t.add({"group_norm_backward",
         "(g, x, weight) -> (grad_x, grad_weight, grad_bias) with num_groups groups; x [N, ..., C] with "
         "channels_last=1",
         3,
         3,
         0,
         {reqAttr("num_groups", AttrKind::Int), eps, optAttr("channels_last", int64_t{0})},
         inferGroupNormBackward,
         normBackwardCost});
  t.add({"softmax_backward",
         "gradient of softmax from (g, y): y * (g - sum(g * y, dim))",
         2,
         2,
         0,
         {reqAttr("dim", AttrKind::Int)},
         inferSoftmaxBackward,
         normBackwardCost});
  t.add({"log_softmax_backward",
         "gradient of log_softmax from (g, y): g - exp(y) * sum(g, dim)",
         2,
         2,
         0,
         {reqAttr("dim", AttrKind::Int)},
         inferSoftmaxBackward,
         normBackwardCost});

  t.setGrad("batch_norm", batchNormGrad);
  t.setGrad("layer_norm", layerNormGrad);
  t.setGrad("group_norm", groupNormGrad);
  t.setGrad("softmax", softmaxGrad);
  t.setGrad("log_softmax", softmaxGrad);
}

}  // namespace kiln
