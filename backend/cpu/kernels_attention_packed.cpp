// The fused attention kernels on packed tiles (tile_gemm.h): f32 and bf16
// q, k, v on CPUs with AVX-512 (bf16: AVX512_BF16). The algorithm is the
// BLAS path's (kernels_attention.cpp: blocks of query rows, scores and
// softmax per [rows, keys] tile in f32, the backward recomputing them);
// what differs is how the tile GEMMs get their operands:
// - k and v are packed once per (batch, head): in the forward by each
//   thread on the first block of a head it runs, in the backward per head;
//   the backward's blocks of q and gy once per block;
// - bf16 q, k, v and gy are read as bf16 by vdpbf16ps (f32 sums): no f32
//   copy of the inputs. The probabilities p and the score gradients gs are
//   rounded to bf16 before the GEMMs that read them, as autocast's unfused
//   bf16 matmuls do; y and the gradients are summed in f32 and rounded
//   once; lse stays f32.
#include "backend/cpu/kernels_attention_packed.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "backend/cpu/attention_rows.h"
#include "backend/cpu/tile_gemm.h"
#include "backend/kernel.h"

namespace kiln::cpu {
namespace {

using namespace attention_rows;

/// dst[r * ldd + c] = src[r * lds + c] for a [rows, cols] f32 tile, in T
/// (bf16: row_math's vector clones, rounding as BFloat16's constructor).
template <typename T>
void copyRows(const float* src, int64_t lds, int64_t rows, int64_t cols, T* dst, int64_t ldd) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * lds;
    T* d = dst + r * ldd;
    if constexpr (std::is_same_v<T, BFloat16>)
      rowToBf16(s, d, cols);
    else
      std::copy(s, s + cols, d);
  }
}

/// dst[c * rows + r] = src[r * lds + c]: the [cols, rows] transpose of a
/// [rows, cols] f32 tile, in T (the A operand of p^T gy and gs^T q). bf16:
/// the rows rounded first (vectorized), then 16-bit moves.
template <typename T>
void transposeRows(const float* src, int64_t lds, int64_t rows, int64_t cols, T* dst) {
  constexpr int64_t kB = 16;  // square blocks: both sides stay in cache lines
  [[maybe_unused]] const T* from = nullptr;
  [[maybe_unused]] int64_t ld = 0;
  if constexpr (std::is_same_v<T, BFloat16>) {
    thread_local std::vector<BFloat16> rounded;
    rounded.resize(static_cast<size_t>(rows * cols));
    copyRows(src, lds, rows, cols, rounded.data(), cols);
    from = rounded.data();
    ld = cols;
  }
  for (int64_t r0 = 0; r0 < rows; r0 += kB)
    for (int64_t c0 = 0; c0 < cols; c0 += kB)
      for (int64_t c = c0; c < std::min(cols, c0 + kB); ++c)
        for (int64_t r = r0; r < std::min(rows, r0 + kB); ++r) {
          if constexpr (std::is_same_v<T, BFloat16>)
            dst[c * rows + r] = from[r * ld + c];
          else
            dst[c * rows + r] = src[r * lds + c];
        }
}

/// The mask as the row loops read it: an additive mask in f32.
struct MaskF32 {
  MaskView view;
  Tensor converted;
  MaskF32(MaskView v, const Tensor* mask) : view(std::move(v)) {
    if (view.kind == MaskKind::Add && mask && mask->dtype() != DType::F32) {
      converted = mask->to(DType::F32);
      view.data = converted.raw();
    }
  }
};

template <typename T>
void forward(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  constexpr bool kF32 = std::is_same_v<T, float>;
  const AttentionSetup a(n, in, 0, 3);
  const AttentionGeom& g = a.g;
  const MaskF32 mask(a.mask, in.size() > 3 ? &in[3] : nullptr);
  const MaskView& mv = mask.view;
  const float scale = static_cast<float>(a.scale);
  const int64_t br = a.block_rows, bhs = a.batch_heads;
  const T* q = in[0].data<T>();
  const T* k = in[1].data<T>();
  const T* v = in[2].data<T>();
  T* y = allocOutput(n, out, 0).data<T>();
  float* lse = allocOutput(n, out, 1).data<float>();
  const int64_t qs = g.rowStride(g.E), vs = g.rowStride(g.Ev);
#pragma omp parallel
  {
    PackedB<T> kt, vp;  // k^T [E, S] and v [S, Ev] of head `packed`
    int64_t packed = -1;
    std::vector<float> s(static_cast<size_t>(br * g.S));
    std::vector<T> p_round(kF32 ? 0 : static_cast<size_t>(br * g.S));
    std::vector<float> y_sum(kF32 ? 0 : static_cast<size_t>(br * g.Ev));
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t bh = 0; bh < bhs; ++bh)
      for (int64_t blk = 0; blk < a.blocks; ++blk) {
        const int64_t o = bh / g.heads, h = bh % g.heads, t0 = blk * br, rows = std::min(br, g.L - t0);
        const int64_t cols = keysOf(a.causal, t0 + rows - 1, g.S);
        T* y0 = y + g.offset(o, h, t0, g.L, g.Ev);
        if (cols == 0) {  // no keys at all: softmax of nothing, as the unfused graph gives (NaN)
          for (int64_t r = 0; r < rows; ++r) {
            std::fill(y0 + r * vs, y0 + r * vs + g.Ev, T(std::numeric_limits<float>::quiet_NaN()));
            lse[bh * g.L + t0 + r] = -std::numeric_limits<float>::infinity();
          }
          continue;
        }
        if (packed != bh) {
          kt.pack(k + g.offset(o, h, 0, g.S, g.E), g.E, g.S, 1, qs);
          vp.pack(v + g.offset(o, h, 0, g.S, g.Ev), g.S, g.Ev, vs, 1);
          packed = bh;
        }
        tileGemm(q + g.offset(o, h, t0, g.L, g.E), qs, kt, rows, cols, g.E, s.data(), cols, false);
        for (int64_t r = 0; r < rows; ++r) {
          float* row = s.data() + r * cols;
          prepareRow(row, cols, keysOf(a.causal, t0 + r, g.S), scale, mv, bh, t0 + r);
          rowSoftmaxInPlace(row, cols, &lse[bh * g.L + t0 + r]);
        }
        if constexpr (kF32) {
          tileGemm(s.data(), cols, vp, rows, g.Ev, cols, y0, vs, false);
        } else {
          copyRows(s.data(), cols, rows, cols, p_round.data(), cols);
          tileGemm(p_round.data(), cols, vp, rows, g.Ev, cols, y_sum.data(), g.Ev, false);
          copyRows(y_sum.data(), g.Ev, rows, g.Ev, y0, vs);
        }
      }
  }
}

template <typename T>
void backward(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  constexpr bool kF32 = std::is_same_v<T, float>;
  const AttentionSetup a(n, in, 1, 6);
  const AttentionGeom& g = a.g;
  const MaskF32 mask(a.mask, in.size() > 6 ? &in[6] : nullptr);
  const MaskView& mv = mask.view;
  const float scale = static_cast<float>(a.scale);
  const int64_t br = a.block_rows, bhs = a.batch_heads;
  const T* gy = in[0].data<T>();
  const T* q = in[1].data<T>();
  const T* k = in[2].data<T>();
  const T* v = in[3].data<T>();
  const float* lse = in[5].data<float>();
  T* gq = allocOutput(n, out, 0).data<T>();
  T* gk = allocOutput(n, out, 1).data<T>();
  T* gv = allocOutput(n, out, 2).data<T>();
  const int64_t qs = g.rowStride(g.E), vs = g.rowStride(g.Ev);
#pragma omp parallel
  {
    PackedB<T> kt, vt, kn, gy_blk, q_blk;  // k^T [E, S], v^T [Ev, S], k [S, E]; gy, q [rows, Ev / E]
    std::vector<float> p(static_cast<size_t>(br * g.S)), gs(static_cast<size_t>(br * g.S));
    std::vector<T> tr(static_cast<size_t>(br * g.S));  // p^T or gs^T [cols, rows]
    std::vector<T> gs_round(kF32 ? 0 : static_cast<size_t>(br * g.S));
    // bf16: gk, gv of the head and gq of the block summed in f32, rounded once.
    std::vector<float> gk_sum(kF32 ? 0 : static_cast<size_t>(g.S * g.E));
    std::vector<float> gv_sum(kF32 ? 0 : static_cast<size_t>(g.S * g.Ev));
    std::vector<float> gq_sum(kF32 ? 0 : static_cast<size_t>(br * g.E));
#pragma omp for schedule(dynamic)
    for (int64_t bh = 0; bh < bhs; ++bh) {
      const int64_t o = bh / g.heads, h = bh % g.heads;
      const T* kb = k + g.offset(o, h, 0, g.S, g.E);
      const T* vb = v + g.offset(o, h, 0, g.S, g.Ev);
      T* gkb = gk + g.offset(o, h, 0, g.S, g.E);
      T* gvb = gv + g.offset(o, h, 0, g.S, g.Ev);
      // Where gk and gv accumulate: the outputs themselves in f32.
      float* gk_acc = kF32 ? reinterpret_cast<float*>(gkb) : gk_sum.data();
      float* gv_acc = kF32 ? reinterpret_cast<float*>(gvb) : gv_sum.data();
      const int64_t ldk = kF32 ? qs : g.E, ldv = kF32 ? vs : g.Ev;
      for (int64_t j = 0; j < g.S; ++j) {
        std::fill(gk_acc + j * ldk, gk_acc + j * ldk + g.E, 0.0f);
        std::fill(gv_acc + j * ldv, gv_acc + j * ldv + g.Ev, 0.0f);
      }
      kt.pack(kb, g.E, g.S, 1, qs);
      vt.pack(vb, g.Ev, g.S, 1, vs);
      kn.pack(kb, g.S, g.E, qs, 1);
      for (int64_t blk = 0; blk < a.blocks; ++blk) {
        const int64_t t0 = blk * br, rows = std::min(br, g.L - t0);
        const int64_t cols = keysOf(a.causal, t0 + rows - 1, g.S);
        const T* qb = q + g.offset(o, h, t0, g.L, g.E);
        const T* gyb = gy + g.offset(o, h, t0, g.L, g.Ev);
        T* gqb = gq + g.offset(o, h, t0, g.L, g.E);
        if (cols == 0) {
          for (int64_t r = 0; r < rows; ++r) std::fill(gqb + r * qs, gqb + r * qs + g.E, T(0.0f));
          continue;
        }
        tileGemm(qb, qs, kt, rows, cols, g.E, p.data(), cols, false);  // scores
        for (int64_t r = 0; r < rows; ++r) {
          float* row = p.data() + r * cols;
          prepareRow(row, cols, keysOf(a.causal, t0 + r, g.S), scale, mv, bh, t0 + r);
          rowExpF32(row, row, cols, lse[bh * g.L + t0 + r]);
        }
        tileGemm(gyb, vs, vt, rows, cols, g.Ev, gs.data(), cols, false);  // gp = gy v^T
        for (int64_t r = 0; r < rows; ++r) {
          const float* pr = p.data() + r * cols;
          float* gr = gs.data() + r * cols;
          rowSoftmaxGradF32(pr, gr, cols, static_cast<float>(rowDotF32(pr, gr, cols)), scale);
          zeroHiddenScoreGrads(gr, cols, keysOf(a.causal, t0 + r, g.S), mv, bh, t0 + r);
        }
        transposeRows(p.data(), cols, rows, cols, tr.data());  // gv += p^T gy
        gy_blk.pack(gyb, rows, g.Ev, vs, 1);
        tileGemm(tr.data(), rows, gy_blk, cols, g.Ev, rows, gv_acc, ldv, true);
        if constexpr (kF32) {  // gq = gs k
          tileGemm(gs.data(), cols, kn, rows, g.E, cols, reinterpret_cast<float*>(gqb), qs, false);
        } else {
          copyRows(gs.data(), cols, rows, cols, gs_round.data(), cols);
          tileGemm(gs_round.data(), cols, kn, rows, g.E, cols, gq_sum.data(), g.E, false);
          copyRows(gq_sum.data(), g.E, rows, g.E, gqb, qs);
        }
        transposeRows(gs.data(), cols, rows, cols, tr.data());  // gk += gs^T q
        q_blk.pack(qb, rows, g.E, qs, 1);
        tileGemm(tr.data(), rows, q_blk, cols, g.E, rows, gk_acc, ldk, true);
      }
      if constexpr (!kF32) {
        copyRows(gk_sum.data(), g.E, g.S, g.E, gkb, qs);
        copyRows(gv_sum.data(), g.Ev, g.S, g.Ev, gvb, vs);
      }
    }
  }
}

/// The packed path's element type for q's dtype, when this CPU has it.
template <typename Fn>
bool dispatchPacked(DType dt, Fn&& fn) {
  if (dt == DType::F32 && tileGemmAvailable<float>()) {
    fn(float{});
    return true;
  }
  if (dt == DType::BF16 && tileGemmAvailable<BFloat16>()) {
    fn(BFloat16{});
    return true;
  }
  return false;
}

}  // namespace

bool attentionPacked(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  return dispatchPacked(in[0].dtype(), [&](auto t) { forward<decltype(t)>(n, in, out); });
}

bool attentionBackwardPacked(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  return dispatchPacked(in[1].dtype(), [&](auto t) { backward<decltype(t)>(n, in, out); });
}

}  // namespace kiln::cpu
