// aten NN overloads -> Kiln NN ops: convolution (1-D runs as conv2d with an
// inserted dim), batch/layer/group norm (missing affine parameters become
// constant ones/zeros), pooling, embedding, dropout, softmax and losses.
// Extra results Kiln does not compute (saved batch statistics, pooling
// indices, layer-norm mean/rstd, nll total_weight) are FxValue::missing, so a
// node that reads one fails with the reason; unused ones cost nothing.
// BatchNorm in training reports its running-stat updates through cx.inplace.
#include "core/import/decompositions/conv3d.h"
#include "core/import/decompositions/embedding_bag.h"
#include "core/import/decompositions/fast_paths.h"
#include "core/import/decompositions/loss.h"
#include "core/import/fx/fx_lowering.h"
#include "core/ops/op_helpers.h"
#include "core/result.h"

namespace kiln::fx {
namespace {

/// A window argument with one value per spatial dim (a single value repeats),
/// each at least `min` (strides, kernels and dilations are positive).
std::vector<int64_t> perDim(NodeArgs& a, std::string_view name, size_t dims, int64_t min = 0) {
  auto v = a.ints(name, kMaxWindow);
  if (v.size() == 1) v.assign(dims, v[0]);
  if (v.size() != dims) a.fail(name, "expected " + std::to_string(dims) + " values, got " + shapeStr(v));
  for (int64_t x : v)
    if (x < min) a.fail(name, "values must be at least " + std::to_string(min) + ", got " + shapeStr(v));
  return v;
}

/// convolution / _convolution / conv1d / conv2d and the transposed ones
/// (ConvTranspose): the shared decomposition (conv2d, or conv2d_input_backward).
FxValue lowerConvolution(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("input");
  Value* w = a.tensor("weight");
  const bool transposed = a.kiln == "transposed" || (a.has("transposed") && a.flag("transposed"));
  int64_t spatial = w->type().rank() - 2;
  if (spatial < 1 || spatial > 3)
    a.fail("weight", "only 1-D, 2-D and 3-D convolutions are supported, weight is " + w->type().str());
  if (x->type().rank() != spatial + 2 && x->type().rank() != spatial + 1)
    a.fail("input", x->type().str() + " does not match a " + std::to_string(spatial) + "-D convolution");
  const size_t n = static_cast<size_t>(spatial);
  decomp::ConvSpec c;
  if (a.arg("padding").kind == FxArg::Kind::String) {
    if (a.str("padding") != "valid") a.fail("padding", "padding=" + quote(a.str("padding")) + " is not supported");
    c.padding.assign(n, 0);
  } else {
    c.padding = perDim(a, "padding", n);
  }
  c.stride = perDim(a, "stride", n, 1);
  c.dilation = perDim(a, "dilation", n, 1);
  c.groups = a.integer("groups");
  c.transposed = transposed;
  if (transposed) c.output_padding = perDim(a, "output_padding", n);
  if (spatial == 3) return FxValue::of(decomp::convolution3d(cx, x, w, a.optTensor("bias"), c));
  return FxValue::of(decomp::convolution(cx, x, w, a.optTensor("bias"), c));
}

const char* kSavedStats =
    "Kiln's batch_norm does not return the saved batch statistics (outputs 1 and 2 of native_batch_norm)";

/// native_batch_norm and the _native_batch_norm_legit* family.
FxValue lowerBatchNorm(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("input");
  if (x->type().rank() < 2) a.fail("input", "must have at least 2 dims, got " + x->type().str());
  int64_t c = x->shape()[1];
  DType dt = x->dtype();
  Value* w = a.optTensor("weight");
  Value* b = a.optTensor("bias");
  Value* rm = a.has("running_mean") ? a.optTensor("running_mean") : nullptr;
  Value* rv = a.has("running_var") ? a.optTensor("running_var") : nullptr;
  bool training = a.has("training") ? a.flag("training") : false;  // _legit_no_training has no flag
  if (!rm != !rv) kiln::fail("running_mean and running_var must both be given or both be None");
  bool tracked = rm != nullptr;
  if (!training && !tracked) kiln::fail("batch norm in eval mode needs running statistics");
  auto momentum = a.optReal("momentum");
  if (training && tracked && !momentum)
    a.fail("momentum", "momentum=None (cumulative moving average) is not supported");
  std::vector<Value*> in = {x, w ? w : cx.full(1, dt, {c}), b ? b : cx.full(0, dt, {c}),
                            rm ? rm : cx.full(0, dt, {c}), rv ? rv : cx.full(1, dt, {c})};
  Node* n = cx.emitNode("batch_norm", in,
                        {{"training", int64_t{training}}, {"momentum", momentum.value_or(0.1)}, {"eps", a.real("eps")}});
  std::vector<FxValue> items = {FxValue::of(n->output(0)), FxValue::missing(kSavedStats),
                                FxValue::missing(kSavedStats)};
  bool updates = training && tracked;
  if (a.kiln == "functional") {
    // _native_batch_norm_legit_functional: results 3 and 4 are the new running stats.
    const char* none = "this batch norm tracks no running statistics";
    items.push_back(updates ? FxValue::of(n->output(1)) : rm ? FxValue::of(rm) : FxValue::missing(none));
    items.push_back(updates ? FxValue::of(n->output(2)) : rv ? FxValue::of(rv) : FxValue::missing(none));
  } else if (updates) {
    cx.inplace["running_mean"] = n->output(1);
    cx.inplace["running_var"] = n->output(2);
  }
  return FxValue::tuple(std::move(items));
}

FxValue lowerLayerNorm(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("input");
  Shape ns = a.sizes("normalized_shape");
  Value* w = a.optTensor("weight");
  Value* b = a.optTensor("bias");
  Value* y = cx.emit("layer_norm", {x, w ? w : cx.full(1, x->dtype(), ns), b ? b : cx.full(0, x->dtype(), ns)},
                     {{"normalized_shape", ns}, {"eps", a.real("eps")}});
  const char* why = "Kiln's layer_norm does not return mean and rstd (outputs 1 and 2 of native_layer_norm)";
  return FxValue::tuple({FxValue::of(y), FxValue::missing(why), FxValue::missing(why)});
}

/// native_group_norm(input, weight?, bias?, N, C, HxW, group, eps).
FxValue lowerGroupNorm(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("input");
  if (x->type().rank() < 2) a.fail("input", "must have at least 2 dims, got " + x->type().str());
  Shape c = {x->shape()[1]};
  Value* w = a.optTensor("weight");
  Value* b = a.optTensor("bias");
  Value* y = cx.emit("group_norm", {x, w ? w : cx.full(1, x->dtype(), c), b ? b : cx.full(0, x->dtype(), c)},
                     {{"num_groups", a.integer("group")}, {"eps", a.real("eps")}});
  const char* why = "Kiln's group_norm does not return mean and rstd (outputs 1 and 2 of native_group_norm)";
  return FxValue::tuple({FxValue::of(y), FxValue::missing(why), FxValue::missing(why)});
}

FxValue lowerEmbedding(Lowering& cx, NodeArgs& a) {
  return FxValue::of(cx.emit("embedding", {a.tensor("weight"), a.tensor("indices")},
                             {{"padding_idx", a.integer("padding_idx")},
                              {"scale_grad_by_freq", int64_t{a.flag("scale_grad_by_freq")}}}));
}

/// _embedding_bag / _embedding_bag_forward_only(weight, indices, offsets, scale_grad_by_freq, mode,
/// sparse, per_sample_weights, include_last_offset, padding_idx) -> (output, offset2bag, bag_size,
/// max_indices): the shared decomposition; the other three results are not computed.
FxValue lowerEmbeddingBag(Lowering& cx, NodeArgs& a) {
  Value* weight = a.tensor("weight");
  Value* offsets = a.tensor("offsets");
  decomp::EmbeddingBagSpec s;
  s.scale_grad_by_freq = a.flag("scale_grad_by_freq");
  s.mode = a.integer("mode");
  s.include_last_offset = a.flag("include_last_offset");
  if (a.has("padding_idx")) {
    const std::optional<int64_t> pad = a.optInt("padding_idx");
    if (pad && *pad >= 0) s.padding_idx = *pad;
    if (pad && *pad < -1) s.padding_idx = *pad + weight->shape()[0];
  }
  const std::optional<Tensor> known = cx.evaluate(offsets);
  Value* y = decomp::embeddingBag(cx, weight, a.tensor("indices"), offsets, known ? &*known : nullptr,
                                  a.optTensor("per_sample_weights"), s);
  const char* why = "Kiln's embedding_bag computes only the bags (offset2bag, bag_size and max_indices are not)";
  return FxValue::tuple({FxValue::of(y), FxValue::missing(why), FxValue::missing(why), FxValue::missing(why)});
}

/// native_dropout(input, p, train?) -> (output, keep-mask). train=None means training.
FxValue lowerNativeDropout(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("input");
  double p = a.real("p");
  if (!(p >= 0 && p <= 1)) a.fail("p", "dropout probability must be in [0, 1]");
  if (!a.optFlag("train").value_or(true))
    return FxValue::tuple({FxValue::of(x), FxValue::of(cx.full(1, DType::Bool, x->shape()))});
  Node* n = cx.emitNode("dropout", {x}, {{"p", p}, {"training", int64_t{1}}});
  return FxValue::tuple({FxValue::of(n->output(0)), FxValue::of(n->output(1))});
}

/// max_pool2d(_with_indices): values only; the indices result is missing.
FxValue lowerMaxPool(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  auto kernel = perDim(a, "kernel_size", 2, 1);
  auto stride = a.ints("stride", kMaxWindow);
  if (!stride.empty()) stride = perDim(a, "stride", 2, 1);
  Value* y = cx.emit("max_pool2d", {x},
                     {{"kernel_size", kernel}, {"stride", stride}, {"padding", perDim(a, "padding", 2)},
                      {"dilation", perDim(a, "dilation", 2, 1)}, {"ceil_mode", int64_t{a.flag("ceil_mode")}}});
  if (a.kiln != "with_indices") return FxValue::of(y);
  return FxValue::tuple({FxValue::of(y), FxValue::missing("the indices result of max pooling is not supported "
                                                          "(Kiln's max_pool2d returns values only)")});
}

FxValue lowerAvgPool(Lowering& cx, NodeArgs& a) {
  auto stride = a.ints("stride", kMaxWindow);
  if (!stride.empty()) stride = perDim(a, "stride", 2, 1);
  int64_t divisor = a.optInt("divisor_override").value_or(0);
  if (divisor < 0) a.fail("divisor_override", "must be positive");
  return FxValue::of(cx.emit("avg_pool2d", {a.tensor("self")},
                             {{"kernel_size", perDim(a, "kernel_size", 2, 1)}, {"stride", stride},
                              {"padding", perDim(a, "padding", 2)}, {"ceil_mode", int64_t{a.flag("ceil_mode")}},
                              {"count_include_pad", int64_t{a.flag("count_include_pad")}},
                              {"divisor_override", divisor}}));
}

/// max_pool3d(_with_indices) and avg_pool3d: the shared 3-D decomposition.
FxValue lowerPool3d(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  auto stride = a.ints("stride", kMaxWindow);
  if (a.kiln == "avg") {
    int64_t divisor = a.optInt("divisor_override").value_or(0);
    if (divisor < 0) a.fail("divisor_override", "must be positive");
    return FxValue::of(decomp::pool3d(cx, x, false, a.ints("kernel_size"), stride, a.ints("padding"), {},
                                      a.flag("ceil_mode"), a.flag("count_include_pad"), divisor));
  }
  Value* y = decomp::pool3d(cx, x, true, a.ints("kernel_size"), stride, a.ints("padding"), a.ints("dilation"),
                            a.flag("ceil_mode"));
  if (a.kiln != "with_indices") return FxValue::of(y);
  return FxValue::tuple({FxValue::of(y), FxValue::missing("the indices result of max pooling is not supported "
                                                          "(Kiln's max pooling returns values only)")});
}

/// _adaptive_avg_pool3d / adaptive_max_pool3d (values; indices missing).
FxValue lowerAdaptivePool3d(Lowering& cx, NodeArgs& a) {
  const bool max = a.kiln == "max";
  Value* y = decomp::adaptivePool3d(cx, a.tensor("self"), max, a.ints("output_size"));
  if (!max) return FxValue::of(y);
  return FxValue::tuple({FxValue::of(y), FxValue::missing("the indices result of adaptive max pooling is not "
                                                          "supported (Kiln's pooling returns values only)")});
}

FxValue lowerAdaptiveAvgPool(Lowering& cx, NodeArgs& a) {
  return FxValue::of(cx.emit("adaptive_avg_pool2d", {a.tensor("self")}, {{"output_size", perDim(a, "output_size", 2)}}));
}

FxValue lowerAdaptiveMaxPool(Lowering& cx, NodeArgs& a) {
  Value* y = cx.emit("adaptive_max_pool2d", {a.tensor("self")}, {{"output_size", perDim(a, "output_size", 2)}});
  return FxValue::tuple({FxValue::of(y), FxValue::missing("the indices result of adaptive max pooling is not "
                                                          "supported (Kiln's adaptive_max_pool2d returns values only)")});
}

/// PyTorch 2.x attention: scaled_dot_product_attention (enable_gqa from 2.5)
/// and the fused kernels torch.export records in its place:
/// _scaled_dot_product_flash_attention_for_cpu (attn_mask keyword),
/// _scaled_dot_product_efficient_attention (attn_bias) and
/// _scaled_dot_product_flash_attention; all the same math (the shared
/// decomposition). Their extra results (logsumexp, RNG state, ...) are
/// only for their own backward: missing here.
FxValue lowerSdpa(Lowering& cx, NodeArgs& a) {
  Value* mask = a.has("attn_mask") ? a.optTensor("attn_mask") : a.has("attn_bias") ? a.optTensor("attn_bias") : nullptr;
  const double p = a.has("dropout_p") ? a.real("dropout_p") : 0.0;
  const bool causal = a.has("is_causal") && a.flag("is_causal");
  const bool gqa = a.has("enable_gqa") && a.flag("enable_gqa");
  Value* y = decomp::sdpa(cx, a.tensor("query"), a.tensor("key"), a.tensor("value"), mask, p, causal,
                          a.optReal("scale"), gqa);
  if (a.kiln.empty()) return FxValue::of(y);
  const int extra = a.kiln == "flash_cpu" ? 1 : a.kiln == "efficient" ? 3 : 8;
  std::vector<FxValue> out{FxValue::of(y)};
  for (int k = 0; k < extra; ++k)
    out.push_back(FxValue::missing("the fused attention's auxiliary results (logsumexp, RNG state) are not computed"));
  return FxValue::tuple(std::move(out));
}

/// rms_norm(input, normalized_shape, weight=None, eps=None) (PyTorch 2.4+) and
/// _fused_rms_norm(input, normalized_shape, weight, eps) -> (output, rstd).
FxValue lowerRmsNorm(Lowering& cx, NodeArgs& a) {
  auto [y, rstd] = decomp::rmsNorm(cx, a.tensor("input"), a.ints("normalized_shape"), a.optTensor("weight"),
                                   a.optReal("eps"));
  if (a.kiln != "fused") return FxValue::of(y);
  return FxValue::tuple({FxValue::of(y), FxValue::of(rstd)});
}

/// _softmax / _log_softmax(self, dim, half_to_float) and softmax.int / log_softmax.int(self, dim, dtype?).
FxValue lowerSoftmax(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  if (a.has("half_to_float") && a.flag("half_to_float")) x = cx.cast(x, DType::F32);
  if (a.has("dtype"))
    if (auto dt = a.optDType("dtype")) x = cx.cast(x, *dt);
  return FxValue::of(cx.emit(a.kiln, {x}, {{"dim", normDim(a.integer("dim"), x->type().rank())}}));
}

/// _native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias,
/// proj_weight, proj_bias, mask=None, need_weights=True, average_attn_weights=True, mask_type=None)
/// -> (out, weights): nn.MultiheadAttention's inference fast path (decompositions/fast_paths.h).
FxValue lowerFastMha(Lowering& cx, NodeArgs& a) {
  const int64_t heads = a.integer("num_head");
  decomp::FastAttention r = decomp::fastAttention(
      cx, a.tensor("query"), a.tensor("key"), a.tensor("value"), a.integer("embed_dim"), heads, a.tensor("qkv_weight"),
      a.tensor("qkv_bias"), a.tensor("proj_weight"), a.tensor("proj_bias"), a.optTensor("mask"), a.optInt("mask_type"));
  if (!a.flag("need_weights"))  // the op returns an undefined tensor (None in the dump)
    return FxValue::tuple({FxValue::of(r.out), FxValue::missing("need_weights=False: no attention weights")});
  Value* w = decomp::fastAttentionWeights(cx, r, heads, true, a.flag("average_attn_weights"));
  return FxValue::tuple({FxValue::of(r.out), FxValue::of(w)});
}

/// _transformer_encoder_layer_fwd: nn.TransformerEncoderLayer's inference fast path;
/// _transformer_decoder_only_layer_fwd (variant "decoder_only"): one incremental
/// decoding step over cached keys and values -> (out, keys, values).
FxValue lowerFastEncoderLayer(Lowering& cx, NodeArgs& a) {
  const bool decoder = a.kiln == "decoder_only";
  if (decoder && a.given("mask"))
    a.fail("mask", "_transformer_decoder_only_layer_fwd with a mask is not supported (PyTorch's CPU kernel refuses "
                   "it too)");
  decomp::FastEncoderLayer p{a.integer("embed_dim"), a.integer("num_heads"), a.tensor("qkv_weight"),
                             a.tensor("qkv_bias"), a.tensor("proj_weight"), a.tensor("proj_bias"),
                             a.flag("use_gelu"), a.flag("norm_first"), a.real("eps"),
                             a.tensor("norm_weight_1"), a.tensor("norm_bias_1"), a.tensor("norm_weight_2"),
                             a.tensor("norm_bias_2"), a.tensor("ffn_weight_1"), a.tensor("ffn_bias_1"),
                             a.tensor("ffn_weight_2"), a.tensor("ffn_bias_2"), decoder ? nullptr : a.optTensor("mask"),
                             decoder ? std::nullopt : a.optInt("mask_type")};
  decomp::FastLayerOut r = decomp::fastLayer(cx, a.tensor("src"), p, decoder ? a.optTensor("incr_key") : nullptr,
                                             decoder ? a.optTensor("incr_value") : nullptr);
  if (!decoder) return FxValue::of(r.out);
  return FxValue::tuple({FxValue::of(r.out), FxValue::of(r.keys), FxValue::of(r.values)});
}

/// PyTorch's reduction enum (0 none, 1 mean, 2 sum) as Kiln's string.
std::string reduction(NodeArgs& a) {
  switch (a.integer("reduction")) {
    case 0: return "none";
    case 1: return "mean";
    case 2: return "sum";
    default: a.fail("reduction", "expected 0 (none), 1 (mean) or 2 (sum)");
  }
}

/// nll_loss_forward / nll_loss2d_forward -> (loss, total_weight); nll_loss -> loss.
FxValue lowerNllLoss(Lowering& cx, NodeArgs& a) {
  if (Value* w = a.optTensor("weight")) {  // class weights: decomposed, total_weight included
    Value* total = nullptr;
    Value* loss = decomp::weightedNll(cx, a.tensor("self"), a.tensor("target"), w, reduction(a),
                                      a.integer("ignore_index"), &total);
    if (a.kiln != "forward") return FxValue::of(loss);
    return FxValue::tuple({FxValue::of(loss), FxValue::of(total)});
  }
  Value* loss = cx.emit("nll_loss", {a.tensor("self"), a.tensor("target")},
                        {{"reduction", reduction(a)}, {"ignore_index", a.integer("ignore_index")}});
  if (a.kiln != "forward") return FxValue::of(loss);
  return FxValue::tuple({FxValue::of(loss), FxValue::missing("Kiln's nll_loss does not return total_weight")});
}

/// l1_loss / smooth_l1_loss(.., beta) / huber_loss(.., delta) with their reduction.
FxValue lowerRobustLoss(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  const std::string kind(a.kiln);
  const double k = kind == "smooth_l1" ? a.real("beta") : kind == "huber" ? a.real("delta") : 1.0;
  Value* loss = decomp::robustLoss(cx, x, cx.cast(a.tensor("target"), x->dtype()), kind, k);
  return FxValue::of(decomp::reduceLoss(cx, loss, reduction(a)));
}

/// binary_cross_entropy(self, target, weight, reduction).
FxValue lowerBce(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  Value* w = a.optTensor("weight");
  Value* loss = decomp::bce(cx, x, cx.cast(a.tensor("target"), x->dtype()), w ? cx.cast(w, x->dtype()) : nullptr);
  return FxValue::of(decomp::reduceLoss(cx, loss, reduction(a)));
}

/// binary_cross_entropy_with_logits(self, target, weight, pos_weight, reduction).
FxValue lowerBceLogits(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  Value* w = a.optTensor("weight");
  Value* pw = a.optTensor("pos_weight");
  Value* loss = decomp::bceWithLogits(cx, x, cx.cast(a.tensor("target"), x->dtype()),
                                      w ? cx.cast(w, x->dtype()) : nullptr, pw ? cx.cast(pw, x->dtype()) : nullptr);
  return FxValue::of(decomp::reduceLoss(cx, loss, reduction(a)));
}

/// kl_div(self, target, reduction, log_target).
FxValue lowerKlDiv(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  Value* loss = decomp::klDiv(cx, x, cx.cast(a.tensor("target"), x->dtype()), a.flag("log_target"));
  return FxValue::of(decomp::reduceLoss(cx, loss, reduction(a)));
}

FxValue lowerMseLoss(Lowering& cx, NodeArgs& a) {
  return FxValue::of(cx.emit("mse_loss", {a.tensor("self"), a.tensor("target")}, {{"reduction", reduction(a)}}));
}

// The third column selects a variant of a shared rule where it is not a Kiln op.
constexpr FxRule kRules[] = {
    {"aten.convolution.default", lowerConvolution},
    {"aten._convolution.default", lowerConvolution},
    {"aten.conv2d.default", lowerConvolution},
    {"aten.conv1d.default", lowerConvolution},
    {"aten.conv3d.default", lowerConvolution},
    {"aten.conv_transpose3d.input", lowerConvolution, "transposed"},
    {"aten.conv_transpose1d.default", lowerConvolution, "transposed"},
    {"aten.conv_transpose2d.input", lowerConvolution, "transposed"},
    {"aten.native_batch_norm.default", lowerBatchNorm},
    {"aten._native_batch_norm_legit.default", lowerBatchNorm},
    {"aten._native_batch_norm_legit.no_stats", lowerBatchNorm},
    {"aten._native_batch_norm_legit_no_training.default", lowerBatchNorm},
    {"aten._native_batch_norm_legit_functional.default", lowerBatchNorm, "functional"},
    {"aten.native_layer_norm.default", lowerLayerNorm},
    {"aten.rms_norm.default", lowerRmsNorm},
    {"aten._fused_rms_norm.default", lowerRmsNorm, "fused"},
    {"aten.scaled_dot_product_attention.default", lowerSdpa},
    {"aten._scaled_dot_product_flash_attention_for_cpu.default", lowerSdpa, "flash_cpu"},
    {"aten._scaled_dot_product_efficient_attention.default", lowerSdpa, "efficient"},
    {"aten._scaled_dot_product_flash_attention.default", lowerSdpa, "flash"},
    {"aten._native_multi_head_attention.default", lowerFastMha},
    {"aten._transformer_encoder_layer_fwd.default", lowerFastEncoderLayer},
    {"aten._transformer_decoder_only_layer_fwd.default", lowerFastEncoderLayer, "decoder_only"},
    {"aten.native_group_norm.default", lowerGroupNorm},
    {"aten.embedding.default", lowerEmbedding},
    {"aten._embedding_bag.default", lowerEmbeddingBag},
    {"aten._embedding_bag_forward_only.default", lowerEmbeddingBag},
    {"aten.embedding_bag.default", lowerEmbeddingBag},
    {"aten.embedding_bag.padding_idx", lowerEmbeddingBag},
    {"aten.native_dropout.default", lowerNativeDropout},
    {"aten.max_pool2d_with_indices.default", lowerMaxPool, "with_indices"},
    {"aten.max_pool2d.default", lowerMaxPool},
    {"aten.max_pool3d_with_indices.default", lowerPool3d, "with_indices"},
    {"aten.max_pool3d.default", lowerPool3d},
    {"aten.avg_pool3d.default", lowerPool3d, "avg"},
    {"aten._adaptive_avg_pool3d.default", lowerAdaptivePool3d},
    {"aten.adaptive_avg_pool3d.default", lowerAdaptivePool3d},
    {"aten.adaptive_max_pool3d.default", lowerAdaptivePool3d, "max"},
    {"aten.avg_pool2d.default", lowerAvgPool},
    {"aten._adaptive_avg_pool2d.default", lowerAdaptiveAvgPool},
    {"aten.adaptive_avg_pool2d.default", lowerAdaptiveAvgPool},
    {"aten.adaptive_max_pool2d.default", lowerAdaptiveMaxPool},
    {"aten._softmax.default", lowerSoftmax, "softmax"},
    {"aten._log_softmax.default", lowerSoftmax, "log_softmax"},
    {"aten.softmax.int", lowerSoftmax, "softmax"},
    {"aten.log_softmax.int", lowerSoftmax, "log_softmax"},
    {"aten.nll_loss_forward.default", lowerNllLoss, "forward"},
    {"aten.nll_loss2d_forward.default", lowerNllLoss, "forward"},
    {"aten.nll_loss.default", lowerNllLoss},
    {"aten.mse_loss.default", lowerMseLoss},
    {"aten.kl_div.default", lowerKlDiv},
    {"aten.l1_loss.default", lowerRobustLoss, "l1"},
    {"aten.smooth_l1_loss.default", lowerRobustLoss, "smooth_l1"},
    {"aten.huber_loss.default", lowerRobustLoss, "huber"},
    {"aten.binary_cross_entropy.default", lowerBce},
    {"aten.binary_cross_entropy_with_logits.default", lowerBceLogits},
};

}  // namespace

std::span<const FxRule> nnRules() { return kRules; }

}  // namespace kiln::fx
