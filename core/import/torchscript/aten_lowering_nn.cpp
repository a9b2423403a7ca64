// aten -> Kiln: matrix products, convolution, normalization, embedding,
// dropout, pooling, resampling, softmax and attention. 1-d convolution and
// pooling run as their 2-d Kiln ops with an inserted H=1 dim; missing norm
// weights and biases become `full` ones and zeros; BatchNorm in training
// mode writes its new running statistics into the running_mean/var buffers
// (the importer turns those writes into BufferUpdate outputs).
#include <cmath>
#include <limits>

#include "core/import/decompositions/conv3d.h"
#include "core/import/decompositions/embedding_bag.h"
#include "core/import/decompositions/fast_paths.h"
#include "core/import/torchscript/lowering.h"
#include "core/ops/op_helpers.h"
#include "core/result.h"

namespace kiln::ts {
namespace {

using Out = std::vector<SV>;

Value* reshapeTo(Lowering& cx, Value* v, const Shape& s) {
  return v->shape() == s ? v : cx.emit("reshape", {v}, {{"shape", s}});
}

Value* fullOf(Lowering& cx, const Shape& s, double value, DType t) {
  return cx.emit("full", {}, {{"shape", s}, {"value", value}, {"dtype", t}});
}

/// Insert a size-1 dim at `d`.
Value* unsqueezeAt(Lowering& cx, Value* v, int64_t d) {
  Shape s = v->shape();
  s.insert(s.begin() + d, 1);
  return reshapeTo(cx, v, s);
}

/// Remove the size-1 dim at `d`.
Value* squeezeAt(Lowering& cx, Value* v, int64_t d) {
  Shape s = v->shape();
  s.erase(s.begin() + d);
  return reshapeTo(cx, v, s);
}

/// An int list attribute of 1 or `n` entries, expanded to `n`.
std::vector<int64_t> expandList(std::vector<int64_t> v, size_t n, const char* what) {
  if (v.size() == 1) v.assign(n, v[0]);
  if (v.size() != n) fail(std::string(what) + " must have " + std::to_string(n) + " values, got " + shapeStr(v));
  return v;
}

// ---- Matrix products -------------------------------------------------------------

// linear(input, weight, bias=None)
Out lowerLinear(Lowering& cx, Args& a) {
  std::vector<Value*> ins = {a.tensor(0), a.tensor(1)};
  if (a.given(2)) ins.push_back(a.tensor(2));
  return single(cx, cx.emit("linear", ins));
}

// matmul / mm / bmm / mv / dot
Out lowerMatmul(Lowering& cx, Args& a) {
  return single(cx, cx.emit("matmul", {a.tensor(0), a.tensor(1)}));
}

// outer(self, vec2) / ger: [n] x [m] -> [n, m], a broadcast product (rotary
// position tables: positions x inverse frequencies), in the promoted dtype.
Out lowerOuter(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  Value* y = a.tensor(1);
  if (x->type().rank() != 1 || y->type().rank() != 1)
    fail("outer expects two 1-D tensors, got " + x->type().str() + " and " + y->type().str());
  const DType t = resultType(a[0], a[1]);
  x = reshapeTo(cx, cx.cast(x, t), {x->shape()[0], 1});
  y = reshapeTo(cx, cx.cast(y, t), {1, y->shape()[0]});
  return single(cx, cx.emit("mul", {x, y}));
}

/// beta * self + alpha * product, skipping unit factors and beta == 0.
Value* addScaled(Lowering& cx, Value* self, Value* product, double beta, double alpha) {
  DType t = product->dtype();
  if (alpha != 1.0) product = cx.emit("mul", {product, cx.scalar(alpha, t)});
  if (beta == 0.0) return product;
  self = cx.cast(self, t);
  if (beta != 1.0) self = cx.emit("mul", {self, cx.scalar(beta, t)});
  return cx.emit("add", {product, self});
}

// addmm(self, mat1, mat2, beta=1, alpha=1) / baddbmm(self, batch1, batch2, beta=1, alpha=1)
Out lowerAddmm(Lowering& cx, Args& a) {
  Value* p = cx.emit("matmul", {a.tensor(1), a.tensor(2)});
  double beta = a.given(3) ? a.real(3) : 1.0, alpha = a.given(4) ? a.real(4) : 1.0;
  return single(cx, addScaled(cx, a.tensor(0), p, beta, alpha));
}

// ---- Convolution --------------------------------------------------------------------

struct ConvArgs {
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups = 1;
  std::string pad_mode;  ///< "same" / "valid" when padding was given as a string
  bool transposed = false;
  std::vector<int64_t> output_padding;  ///< transposed only
};

/// Symmetric padding for padding="same" (asymmetric extra goes to the end, as PyTorch does).
Value* padSame(Lowering& cx, Value* x, const Shape& kernel, ConvArgs& c) {
  std::vector<int64_t> extra;  // F.pad order: last dim first
  bool asymmetric = false;
  for (size_t k = kernel.size(); k-- > 0;) {
    int64_t total = c.dilation[k] * (kernel[k] - 1);
    c.padding[k] = total / 2;
    int64_t rest = total - 2 * c.padding[k];
    asymmetric = asymmetric || rest != 0;
    extra.push_back(0);
    extra.push_back(rest);
  }
  if (!asymmetric) return x;
  return cx.emit("pad", {x}, {{"pads", extra}, {"mode", std::string("constant")}, {"value", 0.0}});
}

/// conv1d/conv2d (conv_transpose1d/2d with c.transposed) through the shared
/// decomposition, after expanding the per-dim lists and padding="same".
Value* convolution(Lowering& cx, Value* x, Value* w, Value* b, ConvArgs c) {
  int64_t spatial = w->type().rank() - 2;
  if (spatial < 1 || spatial > 3)
    fail(std::to_string(spatial) + "-d convolution is not supported (Kiln has conv2d; 1-d and 3-d map onto it)");
  c.stride = expandList(c.stride, spatial, "stride");
  c.dilation = expandList(c.dilation, spatial, "dilation");
  Shape kernel(w->shape().begin() + 2, w->shape().end());
  if (c.pad_mode == "same") {
    for (int64_t s : c.stride)
      if (s != 1) fail("padding='same' needs stride 1");
    c.padding.assign(spatial, 0);
    x = padSame(cx, x, kernel, c);
  } else if (c.pad_mode == "valid") {
    c.padding.assign(spatial, 0);
  } else {
    c.padding = expandList(c.padding, spatial, "padding");
  }
  decomp::ConvSpec spec{c.stride, c.padding, c.dilation, {}, c.groups, c.transposed};
  if (c.transposed) spec.output_padding = expandList(c.output_padding, spatial, "output_padding");
  if (spatial == 3) return decomp::convolution3d(cx, x, w, b, spec);
  return decomp::convolution(cx, x, w, b, spec);
}

// conv1d / conv2d / _convolution_mode(input, weight, bias, stride, padding, dilation, groups);
// padding may be a string ("same", "valid").
Out lowerConv(Lowering& cx, Args& a) {
  ConvArgs c;
  c.stride = a.ints(3);
  if (a[4].kind == SV::Kind::Str)
    c.pad_mode = a.str(4);
  else
    c.padding = a.ints(4);
  c.dilation = a.ints(5);
  c.groups = a.integer(6);
  return single(cx, convolution(cx, a.tensor(0), a.tensor(1), a.given(2) ? a.tensor(2) : nullptr, c));
}

// _convolution / convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, ...)
Out lowerConvolution(Lowering& cx, Args& a) {
  ConvArgs c;
  c.stride = a.ints(3);
  c.padding = a.ints(4);
  c.dilation = a.ints(5);
  c.transposed = a.flag(6);
  c.output_padding = a.ints(7);
  c.groups = a.integer(8);
  return single(cx, convolution(cx, a.tensor(0), a.tensor(1), a.given(2) ? a.tensor(2) : nullptr, c));
}

// conv_transpose1d / conv_transpose2d(input, weight, bias, stride, padding, output_padding, groups, dilation)
Out lowerConvTranspose(Lowering& cx, Args& a) {
  ConvArgs c;
  c.transposed = true;
  c.stride = a.ints(3);
  c.padding = a.ints(4);
  c.output_padding = a.ints(5);
  c.groups = a.integer(6);
  c.dilation = a.ints(7);
  return single(cx, convolution(cx, a.tensor(0), a.tensor(1), a.given(2) ? a.tensor(2) : nullptr, c));
}

// ---- Normalization -----------------------------------------------------------------------

Value* orFull(Lowering& cx, Args& a, size_t k, const Shape& s, double value, DType t) {
  return a.given(k) ? cx.cast(a.tensor(k), t) : fullOf(cx, s, value, t);
}

// batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled)
Out lowerBatchNorm(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  if (x->type().rank() < 2) fail("batch_norm needs an input with a channel dim, got " + x->type().str());
  Shape c = {x->shape()[1]};
  DType t = x->dtype();
  bool training = a.flag(5);
  bool has_stats = a.given(3) && a.given(4);
  if (!has_stats && !training) fail("batch_norm without running statistics must use batch statistics");
  std::vector<Value*> ins = {x, orFull(cx, a, 1, c, 1.0, t), orFull(cx, a, 2, c, 0.0, t), orFull(cx, a, 3, c, 0.0, t),
                             orFull(cx, a, 4, c, 1.0, t)};
  double momentum = a.given(6) ? a.real(6) : 0.1;
  Node* n =
      cx.emitNode("batch_norm", ins, {{"training", int64_t{training}}, {"momentum", momentum}, {"eps", a.real(7)}});
  if (training && has_stats) {
    cx.write(a[3], n->output(1));
    cx.write(a[4], n->output(2));
  }
  return single(cx, n->output(0));
}

// instance_norm(input, weight, bias, running_mean, running_var, use_input_stats, momentum, eps, cudnn)
// = group_norm with one group per channel.
Out lowerInstanceNorm(Lowering& cx, Args& a) {
  if (!a.flag(5)) fail("instance_norm with running statistics (track_running_stats=True in eval) is not supported");
  Value* x = a.tensor(0);
  Shape c = {x->shape()[1]};
  DType t = x->dtype();
  return single(cx, cx.emit("group_norm", {x, orFull(cx, a, 1, c, 1.0, t), orFull(cx, a, 2, c, 0.0, t)},
                            {{"num_groups", x->shape()[1]}, {"eps", a.real(7)}}));
}

// layer_norm(input, normalized_shape, weight, bias, eps, cudnn_enable)
Out lowerLayerNorm(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  Shape ns = a.ints(1);
  DType t = x->dtype();
  double eps = a.given(4) ? a.real(4) : 1e-5;
  return single(cx, cx.emit("layer_norm", {x, orFull(cx, a, 2, ns, 1.0, t), orFull(cx, a, 3, ns, 0.0, t)},
                            {{"normalized_shape", ns}, {"eps", eps}}));
}

// group_norm(input, num_groups, weight, bias, eps, cudnn_enabled)
Out lowerGroupNorm(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  Shape c = {x->shape()[1]};
  DType t = x->dtype();
  double eps = a.given(4) ? a.real(4) : 1e-5;
  return single(cx, cx.emit("group_norm", {x, orFull(cx, a, 2, c, 1.0, t), orFull(cx, a, 3, c, 0.0, t)},
                            {{"num_groups", a.integer(1)}, {"eps", eps}}));
}

// embedding(weight, indices, padding_idx=-1, scale_grad_by_freq, sparse).
// sparse=True asks PyTorch for a sparse gradient tensor; Kiln's gradient is
// dense with the same values (its sparse allreduce works on blocks of it).
Out lowerEmbedding(Lowering& cx, Args& a) {
  int64_t pad = a.given(2) ? a.integer(2) : -1;
  int64_t by_freq = a.given(3) && a.flag(3);
  return single(cx, cx.emit("embedding", {a.tensor(0), a.tensor(1)},
                            {{"padding_idx", pad}, {"scale_grad_by_freq", by_freq}}));
}

// embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
//     include_last_offset[, padding_idx]) and _embedding_bag(...) -> (output, offset2bag, bag_size,
//     max_indices): the shared decomposition; the other three results are not computed.
Out lowerEmbeddingBag(Lowering& cx, Args& a) {
  Value* weight = a.tensor(0);
  decomp::EmbeddingBagSpec s;
  s.scale_grad_by_freq = a.given(3) && a.flag(3);
  s.mode = a.given(4) ? a.integer(4) : 0;
  s.include_last_offset = a.given(7) && a.flag(7);
  if (a.given(8)) {
    int64_t pad = a.integer(8);
    if (pad < -1) pad += weight->shape()[0];  // F.embedding_bag passes -1 for none
    if (pad >= 0) s.padding_idx = pad;
  }
  const Tensor* known = a[2].kind == SV::Kind::Const ? &a[2].constant : nullptr;
  Value* y = decomp::embeddingBag(cx, weight, a.tensor(1), a.tensor(2), known, a.given(6) ? a.tensor(6) : nullptr, s);
  return {cx.fresh(y), SV::uninit(), SV::uninit(), SV::uninit()};  // using the others fails
}

// ---- Dropout -------------------------------------------------------------------------------

// dropout / feature_dropout / alpha_dropout / feature_alpha_dropout(input, p, train)
Out lowerDropout(Lowering& cx, Args& a) {
  double p = a.real(1);
  if (!a.flag(2) || p == 0.0) return {a[0]};
  Value* x = a.tensor(0);
  const std::string_view kind = a.kiln_op;
  bool feature = kind == "feature" || kind == "feature_alpha";
  bool alpha = kind == "alpha" || kind == "feature_alpha";
  if (!feature && !alpha)
    return single(cx, cx.emitNode("dropout", {x}, {{"p", p}, {"training", int64_t{1}}})->output(0));
  // A keep mask scaled by 1/(1-p): per element, or per (sample, channel) for the feature variants.
  Shape noise = x->shape();
  if (feature)
    for (size_t k = 2; k < noise.size(); ++k) noise[k] = 1;
  Value* ones = fullOf(cx, noise, 1.0, x->dtype());
  Value* m = cx.emitNode("dropout", {ones}, {{"p", p}, {"training", int64_t{1}}})->output(0);
  if (!alpha) return single(cx, cx.emit("mul", {x, m}));
  // alpha dropout keeps SELU's mean and variance: a * (x * keep + alpha' * (1 - keep)) + b
  const double alpha_p = -1.7580993408473766;
  double q = 1.0 - p, ka = 1.0 / std::sqrt(q * (1.0 + p * alpha_p * alpha_p)), kb = -ka * alpha_p * p;
  DType t = x->dtype();
  Value* keep = cx.emit("mul", {m, cx.scalar(q, t)});
  Value* drop = cx.emit("sub", {cx.scalar(1.0, t), keep});
  Value* y = cx.emit("add", {cx.emit("mul", {x, keep}), cx.emit("mul", {drop, cx.scalar(alpha_p, t)})});
  return single(cx, cx.emit("add", {cx.emit("mul", {y, cx.scalar(ka, t)}), cx.scalar(kb, t)}));
}

// ---- Pooling -------------------------------------------------------------------------------

/// Pooling ops run on [N, C, H, W] or [C, H, W]; 1-d pooling adds H = 1.
Out pool(Lowering& cx, Args& a, bool one_d, bool with_indices) {
  Value* x = a.tensor(0);
  std::string op(a.kiln_op);
  AttrMap attrs;
  // 1-d windows become [1, w] (and padding [0, p], dilation [1, d]).
  auto window = [&](std::vector<int64_t> v, int64_t lead) {
    if (one_d && !v.empty()) v = {lead, v.back()};
    return v;
  };
  if (op.rfind("adaptive", 0) == 0) {
    attrs["output_size"] = window(a.ints(1), 1);
  } else {
    attrs["kernel_size"] = window(a.ints(1), 1);
    attrs["stride"] = window(a.given(2) ? a.ints(2) : std::vector<int64_t>{}, 1);
    attrs["padding"] = window(a.ints(3), 0);
    if (op == "max_pool2d") {
      attrs["dilation"] = window(a.ints(4), 1);
      attrs["ceil_mode"] = int64_t{a.flag(5)};
    } else {
      attrs["ceil_mode"] = int64_t{a.given(4) && a.flag(4)};
      attrs["count_include_pad"] = int64_t{!a.given(5) || a.flag(5)};
      if (a.given(6)) attrs["divisor_override"] = a.integer(6);
    }
  }
  int64_t h = x->type().rank() - 1;
  if (one_d) x = unsqueezeAt(cx, x, h);
  Value* y = cx.emit(op, {x}, attrs);
  if (one_d) y = squeezeAt(cx, y, h);
  Out out = single(cx, y);
  // Indices are not computed; using them fails ("expected a tensor, got uninitialized").
  if (with_indices) out.push_back(SV::uninit());
  return out;
}

Out lowerPool2d(Lowering& cx, Args& a) {
  return pool(cx, a, false, false);
}

// max_pool3d(self, kernel_size, stride=[], padding=0, dilation=1, ceil_mode=False) (and _with_indices);
// avg_pool3d(self, kernel_size, stride=[], padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None)
Out lowerPool3d(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  const std::vector<int64_t> stride = a.given(2) ? a.ints(2) : std::vector<int64_t>{};
  Value* y = nullptr;
  if (a.kiln_op != "avg") {
    y = decomp::pool3d(cx, x, true, a.ints(1), stride, a.ints(3), a.ints(4), a.flag(5));
    if (a.kiln_op == "max") return single(cx, y);
    return {cx.fresh(y), SV::uninit()};  // indices are not computed; using them fails
  }
  y = decomp::pool3d(cx, x, false, a.ints(1), stride, a.ints(3), {}, a.given(4) && a.flag(4), !a.given(5) || a.flag(5),
                     a.given(6) ? a.integer(6) : 0);
  return single(cx, y);
}

// adaptive_avg_pool3d(self, output_size); adaptive_max_pool3d(self, output_size) -> (values, indices)
Out lowerAdaptivePool3d(Lowering& cx, Args& a) {
  const bool max = a.kiln_op == "max";
  Value* y = decomp::adaptivePool3d(cx, a.tensor(0), max, a.ints(1));
  if (max) return {cx.fresh(y), SV::uninit()};
  return single(cx, y);
}
Out lowerPool1d(Lowering& cx, Args& a) {
  return pool(cx, a, true, false);
}
Out lowerPool2dIndices(Lowering& cx, Args& a) {
  return pool(cx, a, false, true);
}
Out lowerPool1dIndices(Lowering& cx, Args& a) {
  return pool(cx, a, true, true);
}

// ---- Softmax and attention -------------------------------------------------------------------

// softmax/log_softmax(self, dim, dtype=None); _softmax(self, dim, half_to_float)
Out lowerSoftmax(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  if (a.size() > 2 && a[2].kind == SV::Kind::Int) x = cx.cast(x, *a.optDType(2));
  if (!isFloating(x->dtype())) x = cx.cast(x, DType::F32);
  int64_t d = normDim(a.integer(1), x->type().rank());
  return single(cx, cx.emit(a.kiln_op, {x}, {{"dim", d}}));
}

// scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0, is_causal=False, scale=None)
Out lowerSdpa(Lowering& cx, Args& a) {
  std::optional<double> scale;
  if (a.given(6)) scale = a.real(6);
  return single(cx, decomp::sdpa(cx, a.tensor(0), a.tensor(1), a.tensor(2), a.given(3) ? a.tensor(3) : nullptr,
                                 a.given(4) ? a.real(4) : 0.0, a.given(5) && a.flag(5), scale));
}

// ---- The inference fast paths of nn.MultiheadAttention / nn.TransformerEncoderLayer --------
// Traced under torch.no_grad(), both modules call one fused op: the shared
// decomposition (decompositions/fast_paths.h), as in the FX importer.

// _native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias,
//     proj_weight, proj_bias, mask=None, need_weights=True, average_attn_weights=True, mask_type=None)
//   -> (out, weights): weights averaged over heads [B, L, S], per head [B, H, L, S], or empty.
Out lowerFastMha(Lowering& cx, Args& a) {
  const int64_t heads = a.integer(4);
  decomp::FastAttention r =
      decomp::fastAttention(cx, a.tensor(0), a.tensor(1), a.tensor(2), a.integer(3), heads, a.tensor(5), a.tensor(6),
                            a.tensor(7), a.tensor(8), a.given(9) ? a.tensor(9) : nullptr, a.optInt(12));
  const bool need = !a.given(10) || a.flag(10), average = !a.given(11) || a.flag(11);
  return {cx.fresh(r.out), cx.fresh(decomp::fastAttentionWeights(cx, r, heads, need, average))};
}

// _transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
//     use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2,
//     ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None, mask_type=None)
// _transformer_decoder_only_layer_fwd(the same 18, mask=None, incr_key=None, incr_value=None)
//     -> (out, keys, values): one incremental decoding step over cached keys and values.
Out lowerFastEncoderLayer(Lowering& cx, Args& a) {
  const bool decoder = a.kiln_op == "decoder_only";
  if (decoder && a.given(18))
    fail("_transformer_decoder_only_layer_fwd with a mask is not supported (PyTorch's CPU kernel refuses it too)");
  decomp::FastEncoderLayer p{a.integer(1), a.integer(2), a.tensor(3), a.tensor(4), a.tensor(5), a.tensor(6),
                             a.flag(7), a.flag(8), a.real(9), a.tensor(10), a.tensor(11), a.tensor(12),
                             a.tensor(13), a.tensor(14), a.tensor(15), a.tensor(16), a.tensor(17),
                             !decoder && a.given(18) ? a.tensor(18) : nullptr,
                             decoder ? std::nullopt : a.optInt(19)};
  decomp::FastLayerOut r = decomp::fastLayer(cx, a.tensor(0), p, decoder && a.given(19) ? a.tensor(19) : nullptr,
                                             decoder && a.given(20) ? a.tensor(20) : nullptr);
  if (!decoder) return single(cx, r.out);
  return {cx.fresh(r.out), cx.fresh(r.keys), cx.fresh(r.values)};
}

// einsum(equation, tensors, *, path=None)
Out lowerEinsum(Lowering& cx, Args& a) {
  std::vector<Value*> ops;
  for (const SV& t : a[1].elems()) ops.push_back(cx.read(t));
  return single(cx, decomp::einsum(cx, a.str(0), ops));
}

const AtenRule kRules[] = {
    // Matrix products.
    {"aten::linear", lowerLinear},
    {"aten::matmul", lowerMatmul},
    {"aten::einsum", lowerEinsum},
    {"aten::mm", lowerMatmul},
    {"aten::bmm", lowerMatmul},
    {"aten::mv", lowerMatmul},
    {"aten::dot", lowerMatmul},
    {"aten::outer", lowerOuter},
    {"aten::ger", lowerOuter},
    {"aten::addmm", lowerAddmm},
    {"aten::baddbmm", lowerAddmm},
    // Convolution (1-d through conv2d; transposed through conv2d_input_backward).
    {"aten::conv1d", lowerConv},
    {"aten::conv_transpose1d", lowerConvTranspose},
    {"aten::conv_transpose2d", lowerConvTranspose},
    {"aten::conv2d", lowerConv},
    {"aten::conv3d", lowerConv},
    {"aten::conv_transpose3d", lowerConvTranspose},
    {"aten::_convolution", lowerConvolution},
    {"aten::_convolution_mode", lowerConv},
    {"aten::convolution", lowerConvolution},
    // Normalization and embedding.
    {"aten::batch_norm", lowerBatchNorm},
    {"aten::instance_norm", lowerInstanceNorm},
    {"aten::layer_norm", lowerLayerNorm},
    {"aten::group_norm", lowerGroupNorm},
    {"aten::embedding", lowerEmbedding},
    {"aten::embedding_bag", lowerEmbeddingBag},
    {"aten::_embedding_bag", lowerEmbeddingBag},
    {"aten::_embedding_bag_forward_only", lowerEmbeddingBag},
    // Dropout (identity unless training).
    {"aten::dropout", lowerDropout, "dropout"},
    {"aten::feature_dropout", lowerDropout, "feature"},
    {"aten::alpha_dropout", lowerDropout, "alpha"},
    {"aten::feature_alpha_dropout", lowerDropout, "feature_alpha"},
    // Pooling.
    {"aten::max_pool2d", lowerPool2d, "max_pool2d"},
    {"aten::max_pool3d", lowerPool3d, "max"},
    {"aten::max_pool3d_with_indices", lowerPool3d, "max_indices"},
    {"aten::avg_pool3d", lowerPool3d, "avg"},
    {"aten::adaptive_avg_pool3d", lowerAdaptivePool3d, "avg"},
    {"aten::_adaptive_avg_pool3d", lowerAdaptivePool3d, "avg"},
    {"aten::adaptive_max_pool3d", lowerAdaptivePool3d, "max"},
    {"aten::avg_pool2d", lowerPool2d, "avg_pool2d"},
    {"aten::adaptive_avg_pool2d", lowerPool2d, "adaptive_avg_pool2d"},
    {"aten::adaptive_max_pool2d", lowerPool2dIndices, "adaptive_max_pool2d"},
    {"aten::max_pool2d_with_indices", lowerPool2dIndices, "max_pool2d"},
    {"aten::max_pool1d", lowerPool1d, "max_pool2d"},
    {"aten::avg_pool1d", lowerPool1d, "avg_pool2d"},
    {"aten::adaptive_avg_pool1d", lowerPool1d, "adaptive_avg_pool2d"},
    {"aten::adaptive_max_pool1d", lowerPool1dIndices, "adaptive_max_pool2d"},
    // Softmax and attention.
    {"aten::softmax", lowerSoftmax, "softmax"},
    {"aten::_softmax", lowerSoftmax, "softmax"},
    {"aten::log_softmax", lowerSoftmax, "log_softmax"},
    {"aten::_log_softmax", lowerSoftmax, "log_softmax"},
    {"aten::scaled_dot_product_attention", lowerSdpa},
    {"aten::_native_multi_head_attention", lowerFastMha},
    {"aten::_transformer_encoder_layer_fwd", lowerFastEncoderLayer},
    {"aten::_transformer_decoder_only_layer_fwd", lowerFastEncoderLayer, "decoder_only"},
};

}  // namespace

std::span<const AtenRule> nnRules() {
  return kRules;
}

}  // namespace kiln::ts
