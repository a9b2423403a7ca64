// Shared decompositions (see common.h): the inference fast paths of
// nn.MultiheadAttention (_native_multi_head_attention) and
// nn.TransformerEncoderLayer (_transformer_encoder_layer_fwd), and the
// incremental decoder step _transformer_decoder_only_layer_fwd. Traced or
// captured under torch.no_grad() in eval mode, both modules call one fused op;
// it decomposes into the ops their ordinary path records, so such a model
// imports, runs and trains like one exported with grad enabled.
#pragma once

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/import/decompositions/common.h"

namespace kiln::decomp {

/// Rows [k * d, (k + 1) * d) of a packed in-projection weight or bias.
template <class Cx>
Value* packedRows(Cx& cx, Value* w, int64_t k, int64_t d) {
  return cx.emit("slice", {w}, {{"dim", int64_t{0}}, {"start", k * d}, {"end", (k + 1) * d}, {"step", int64_t{1}}});
}

/// [B, L, D] -> [B, H, L, D / H].
template <class Cx>
Value* splitHeads(Cx& cx, Value* x, int64_t heads) {
  const Shape& s = x->shape();
  Value* r = reshapedTo(cx, x, {s[0], s[1], heads, s[2] / heads});
  return cx.emit("permute", {r}, {{"dims", std::vector<int64_t>{0, 2, 1, 3}}});
}

struct FastAttention {
  Value* out;    ///< [B, L, D], out-projected
  Value* probs;  ///< [B, H, L, S], the attention weights
  Value* keys;   ///< [B, H, S, D / H], the projected keys (after any cached prefix)
  Value* values;  ///< [B, H, S, D / H]
};

/// The fast path's attention: q, k, v [B, L|S, D] projected by the packed
/// qkv_weight [3D, D] and qkv_bias [3D], q divided by sqrt(D / H) (as
/// PyTorch's fused kernel does), a bool mask masking where true or a float
/// mask added (mask_type 1: a [B, S] key padding mask), softmax, heads merged,
/// out-projected. Cached keys and values [B, H, S0, D / H] (incremental
/// decoding) go before the new ones.
template <class Cx>
FastAttention fastAttention(Cx& cx, Value* q, Value* k, Value* v, int64_t d, int64_t heads, Value* w_qkv,
                            Value* b_qkv, Value* w_out, Value* b_out, Value* mask, std::optional<int64_t> mask_type,
                            Value* cached_keys = nullptr, Value* cached_values = nullptr) {
  if (q->type().rank() != 3 || heads <= 0 || d % heads || q->shape()[2] != d)
    fail("the attention fast path expects [batch, length, embed_dim] inputs and heads dividing embed_dim, got " +
         q->type().str() + " with " + std::to_string(heads) + " heads");
  const DType t = q->dtype();
  auto project = [&](Value* x, int64_t i) {
    return splitHeads(cx, cx.emit("linear", {x, packedRows(cx, w_qkv, i, d), packedRows(cx, b_qkv, i, d)}), heads);
  };
  Value* qh = cx.emit("div", {project(q, 0), cx.scalar(std::sqrt(static_cast<double>(d / heads)), t)});
  Value* kh = project(k, 1);
  Value* vh = project(v, 2);
  auto prefixed = [&](Value* cache, Value* x) {
    if (!cache) return x;
    const Shape& c = cache->shape();
    if (c.size() != 4 || c[0] != x->shape()[0] || c[1] != heads || c[3] != d / heads)
      fail("the attention fast path's cached keys/values are " + cache->type().str() + ", expected [" +
           std::to_string(x->shape()[0]) + ", " + std::to_string(heads) + ", S, " + std::to_string(d / heads) + "]");
    return cx.emit("cat", {cx.cast(cache, x->dtype()), x}, {{"dim", int64_t{2}}});
  };
  kh = prefixed(cached_keys, kh);
  vh = prefixed(cached_values, vh);
  Value* kt = cx.emit("permute", {kh}, {{"dims", std::vector<int64_t>{0, 1, 3, 2}}});
  Value* scores = cx.emit("matmul", {qh, kt});
  if (mask) {
    if (mask->type().rank() == 2 && mask_type == 1) {  // key padding: [B, S] -> [B, 1, 1, S]
      const Shape& m = mask->shape();
      mask = reshapedTo(cx, mask, {m[0], 1, 1, m[1]});
    }
    scores = mask->dtype() == DType::Bool
                 ? cx.emit("where", {mask, cx.scalar(-std::numeric_limits<double>::infinity(), t), scores})
                 : cx.emit("add", {scores, cx.cast(mask, t)});
  }
  Value* probs = cx.emit("softmax", {scores}, {{"dim", int64_t{3}}});
  Value* ctx = cx.emit("permute", {cx.emit("matmul", {probs, vh})}, {{"dims", std::vector<int64_t>{0, 2, 1, 3}}});
  const Shape& qs = q->shape();
  Value* out = cx.emit("linear", {reshapedTo(cx, ctx, {qs[0], qs[1], d}), w_out, b_out});
  return {out, probs, kh, vh};
}

/// The attention weights _native_multi_head_attention returns beside its
/// output: averaged over heads [B, L, S] (average), per head [B, H, L, S], or
/// an empty [0] tensor (need_weights false).
template <class Cx>
Value* fastAttentionWeights(Cx& cx, const FastAttention& r, int64_t heads, bool need, bool average) {
  if (!need) return cx.constInput(Tensor(r.out->dtype(), Shape{0}));
  if (!average) return r.probs;
  Value* sum = cx.emit("sum", {r.probs}, {{"dims", std::vector<int64_t>{1}}, {"keepdim", int64_t{0}}});
  return cx.emit("div", {sum, cx.scalar(static_cast<double>(heads), sum->dtype())});
}

/// _transformer_encoder_layer_fwd's parameters, in its argument order.
struct FastEncoderLayer {
  int64_t d = 0, heads = 0;
  Value *w_qkv, *b_qkv, *w_proj, *b_proj;
  bool use_gelu = false, norm_first = false;
  double eps = 1e-5;
  Value *norm1_w, *norm1_b, *norm2_w, *norm2_b;
  Value *ffn1_w, *ffn1_b, *ffn2_w, *ffn2_b;
  Value* mask = nullptr;
  std::optional<int64_t> mask_type;
};

/// The encoder layer's result, and the keys and values its attention used.
struct FastLayerOut {
  Value* out;
  Value* keys;
  Value* values;
};

/// nn.TransformerEncoderLayer's eval forward: self-attention and feed-forward
/// blocks with residuals, layer norms before (norm_first) or after them, no
/// dropout. With cached keys and values, _transformer_decoder_only_layer_fwd's
/// incremental step: the new positions attend to the cache and themselves
/// (no causal mask: as PyTorch's kernel, the cache holds only the past).
template <class Cx>
FastLayerOut fastLayer(Cx& cx, Value* src, const FastEncoderLayer& p, Value* cached_keys = nullptr,
                       Value* cached_values = nullptr) {
  auto norm = [&](Value* x, Value* w, Value* b) {
    return cx.emit("layer_norm", {x, w, b}, {{"normalized_shape", Shape{p.d}}, {"eps", p.eps}});
  };
  Value* x = p.norm_first ? norm(src, p.norm1_w, p.norm1_b) : src;
  FastAttention att = fastAttention(cx, x, x, x, p.d, p.heads, p.w_qkv, p.b_qkv, p.w_proj, p.b_proj, p.mask,
                                    p.mask_type, cached_keys, cached_values);
  x = cx.emit("add", {src, att.out});
  if (!p.norm_first) x = norm(x, p.norm1_w, p.norm1_b);
  Value* h = p.norm_first ? norm(x, p.norm2_w, p.norm2_b) : x;
  h = cx.emit("linear", {h, p.ffn1_w, p.ffn1_b});
  h = p.use_gelu ? cx.emit("gelu", {h}, {{"approximate", std::string("none")}}) : cx.emit("relu", {h});
  h = cx.emit("add", {x, cx.emit("linear", {h, p.ffn2_w, p.ffn2_b})});
  return {p.norm_first ? h : norm(h, p.norm2_w, p.norm2_b), att.keys, att.values};
}

}  // namespace kiln::decomp
