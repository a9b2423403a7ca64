// The fused attention ops (core/ops/attention.cpp) and the geometry their
// shape inference and kernels share.
//
//   attention(q, k, v[, mask]) {scale, causal, mask, tokens_outer} -> (y, lse)
//   attention_backward(gy, q, k, v, y, lse[, mask]) {same} -> (gq, gk, gv)
//
// Logically q is [*, H, L, E], k [*, H, S, E], v [*, H, S, Ev] (H is the
// last batch dim; a rank-3 input has no `*`), and per (batch, head)
//   y = softmax(scale * q k^T  (+ mask)) v,    lse = logsumexp of that row
// y is [*, H, L, Ev] in q's dtype, lse [*, H, L] in the compute dtype (f64
// for f64, else f32). `mask`: "none" (no 4th input), "keep" / "drop" (a
// bool tensor broadcastable to the scores [*, H, L, S]: attend where true /
// where false), "add" (a floating tensor added to the scaled scores).
// `causal` = 1 also masks key j > query i (torch's is_causal, top-left
// aligned). `tokens_outer` = 1 stores q, k, v, y with the token dim before
// the head dim ([*, L, H, E]: the layout a head split by reshape leaves,
// so no permute copies them); lse is logical [*, H, L] either way.
//
// The backward recomputes the scores from q and k and the probabilities
// from lse, so no [L, S] tensor lives between forward and backward.
#pragma once

#include <cstdint>

#include "core/ir.h"

namespace kiln {

/// Sizes and element strides of one attention node (forward or backward).
struct AttentionGeom {
  int64_t outer = 1;  ///< product of the batch dims before the head dim
  int64_t heads = 1, L = 0, S = 0, E = 0, Ev = 0;
  bool tokens_outer = false;
  /// Offset of row t of (batch o, head h) in a tensor with `width` elements per row and `rows` rows.
  int64_t offset(int64_t o, int64_t h, int64_t t, int64_t rows, int64_t width) const {
    return tokens_outer ? (o * rows + t) * heads * width + h * width : ((o * heads + h) * rows + t) * width;
  }
  /// Elements between consecutive rows of one (batch, head).
  int64_t rowStride(int64_t width) const { return tokens_outer ? heads * width : width; }
  /// Logical shape of the scores: the batch dims, then H, L, S.
  Shape scoreShape(const Shape& q_shape) const;
};

/// The geometry of an attention node from q (input `q_index`), k and v;
/// throws (naming the node) when they do not fit together.
AttentionGeom attentionGeom(const Node& n, size_t q_index);

}  // namespace kiln
