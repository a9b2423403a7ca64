// What the fused attention kernels share (kernels_attention.cpp: BLAS
// tiles, f32 and f64; kernels_attention_packed.cpp: packed AVX-512 tiles,
// f32 and bf16): the mask's view per (batch, head), the blocking of the
// query rows, the causal cut, and the score rows' scale / mask / softmax.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_loops.h"
#include "backend/cpu/row_math.h"
#include "core/ops/attention.h"
#include "core/ops/op_helpers.h"

namespace kiln::cpu::attention_rows {

enum class MaskKind { None, Keep, Drop, Add };

inline MaskKind maskKind(const Node& n) {
  const std::string& m = n.s("mask");
  return m == "keep" ? MaskKind::Keep : m == "drop" ? MaskKind::Drop : m == "add" ? MaskKind::Add : MaskKind::None;
}

/// Where each (batch, head)'s mask starts and its row / column strides
/// (0 along broadcast dims).
struct MaskView {
  MaskKind kind = MaskKind::None;
  const void* data = nullptr;
  std::vector<int64_t> base;  // per batch * heads + head
  int64_t row_stride = 0, col_stride = 0;
};

inline MaskView maskView(const Node& n, const AttentionGeom& g, const Tensor* mask, size_t q_index) {
  MaskView mv;
  mv.kind = maskKind(n);
  if (!mask) return mv;
  const Shape scores = g.scoreShape(n.input(q_index)->shape());
  const Shape st = broadcastStrides(mask->shape(), scores);
  const size_t r = scores.size();
  mv.data = mask->raw();
  mv.row_stride = st[r - 2];
  mv.col_stride = st[r - 1];
  mv.base.resize(static_cast<size_t>(g.outer * g.heads));
  // Walk the batch dims (all but L, S) of the scores.
  std::vector<int64_t> idx(r - 2, 0);
  for (size_t e = 0; e < mv.base.size(); ++e) {
    int64_t off = 0;
    for (size_t d = 0; d < r - 2; ++d) off += idx[d] * st[d];
    mv.base[e] = off;
    for (size_t d = r - 2; d-- > 0;) {
      if (++idx[d] < scores[d]) break;
      idx[d] = 0;
    }
  }
  return mv;
}

/// Rows per block: about 32K score elements per tile, 16..256 rows.
inline int64_t blockRows(const AttentionGeom& g) {
  return std::clamp<int64_t>(32768 / std::max<int64_t>(g.S, 1), 16, 256);
}

/// Keys row t of a block may see: all S, or t + 1 when causal.
inline int64_t keysOf(bool causal, int64_t t, int64_t S) {
  return causal ? std::min(S, t + 1) : S;
}

/// Scale, mask and causal cut of one score row (in place): keys >= `seen`
/// become -inf.
template <typename T>
void prepareRow(T* row, int64_t n_cols, int64_t seen, T scale, const MaskView& mv, int64_t bh, int64_t t) {
  if constexpr (std::is_same_v<T, float>)
    rowAffineF32(row, seen, scale, 0.0f);
  else
    for (int64_t j = 0; j < seen; ++j) row[j] *= scale;
  const T ninf = -std::numeric_limits<T>::infinity();
  if (mv.kind != MaskKind::None) {
    const int64_t off = mv.base[static_cast<size_t>(bh)] + t * mv.row_stride;
    if (mv.kind == MaskKind::Add) {
      const T* m = static_cast<const T*>(mv.data) + off;
      for (int64_t j = 0; j < seen; ++j) row[j] += m[j * mv.col_stride];
    } else {
      const bool* m = static_cast<const bool*>(mv.data) + off;
      const bool drop_when = mv.kind == MaskKind::Drop;
      for (int64_t j = 0; j < seen; ++j)
        if (m[j * mv.col_stride] == drop_when) row[j] = ninf;
    }
  }
  for (int64_t j = seen; j < n_cols; ++j) row[j] = ninf;
}

/// The score gradients of one row at the keys a keep/drop mask or the causal
/// cut hides (keys >= `seen`) set to 0: the chain fuse_attention replaces
/// masks with masked_fill / where, whose backward zeroes those positions
/// whatever reaches them, so a fully masked row (all-NaN probabilities)
/// sends no gradient to q and k, as in PyTorch. An additive mask is an add:
/// its positions keep their gradient (NaN for a row of -inf).
template <typename T>
void zeroHiddenScoreGrads(T* grad_row, int64_t n_cols, int64_t seen, const MaskView& mv, int64_t bh, int64_t t) {
  if (mv.kind == MaskKind::Keep || mv.kind == MaskKind::Drop) {
    const bool* m = static_cast<const bool*>(mv.data) + mv.base[static_cast<size_t>(bh)] + t * mv.row_stride;
    const bool drop_when = mv.kind == MaskKind::Drop;
    for (int64_t j = 0; j < seen; ++j)
      if (m[j * mv.col_stride] == drop_when) grad_row[j] = T(0);
  }
  for (int64_t j = seen; j < n_cols; ++j) grad_row[j] = T(0);
}

/// Row max and the softmax shift, sum of exp written in place.
template <typename T>
T rowSoftmaxInPlace(T* row, int64_t n, T* lse_out) {
  T shift;
  double sum;
  if constexpr (std::is_same_v<T, float>) {
    shift = softmaxShift(rowMaxF32(row, n));
    sum = rowExpF32(row, row, n, shift);
  } else {
    T mx = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, row[j]);
    shift = std::isinf(mx) && mx < 0 ? T(0) : mx;
    sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      row[j] = std::exp(row[j] - shift);
      sum += row[j];
    }
  }
  const T inv = static_cast<T>(1.0 / sum);
  for (int64_t j = 0; j < n; ++j) row[j] *= inv;
  *lse_out = static_cast<T>(std::log(sum)) + shift;
  return shift;
}

/// What the forward and backward kernels share: geometry, mask, causal cut,
/// scale and the blocking of the query rows.
struct AttentionSetup {
  AttentionGeom g;
  MaskView mask;
  bool causal;
  double scale;
  int64_t block_rows, blocks, batch_heads;
  AttentionSetup(const Node& n, std::span<const Tensor> in, size_t q_index, size_t mask_index)
      : g(attentionGeom(n, q_index)),
        mask(maskView(n, g, in.size() > mask_index ? &in[mask_index] : nullptr, q_index)),
        causal(n.i("causal") != 0),
        scale(n.f("scale")),
        block_rows(blockRows(g)),
        blocks((g.L + block_rows - 1) / block_rows),
        batch_heads(g.outer * g.heads) {}
};


}  // namespace kiln::cpu::attention_rows
