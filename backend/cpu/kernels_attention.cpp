// CPU kernels of the fused attention ops (core/ops/attention.h). On CPUs
// with AVX-512, f32 and bf16 q, k, v run on packed tiles
// (kernels_attention_packed.cpp, the same algorithm); this file's BLAS
// tiles take f64, and f32 / bf16 / f16 elsewhere (the half types computing
// in f32 through viaComputeType).
//
// Forward, per (batch, head) and block of Br query rows: the block's scores
// [Br, S'] = q k^T by one GEMM, then per row scale, mask, max, exp and sum
// (the vectorized row loops of row_math.h for f32), lse, normalize, and
// y = p v by a second GEMM. Only a [Br, S'] tile of scores exists at a time
// (Br shrinks as S grows, ~128 KiB per thread); S' stops at the last key a
// causal block can see, so causal attention skips the upper triangle.
// Backward, per (batch, head), block by block: recompute the tile's scores
// and p = exp(s - lse), then gv += p^T gy, gp = gy v^T,
// gs = p (gp - rowsum(p gp)) * scale (row_math loops for f32), gq = gs k,
// gk += gs^T q.
// Blocks run on OpenMP threads, each tile GEMM on its thread (gemmLd,
// under a SerialBlasScope): the forward over (batch, head, block), the
// backward over (batch, head), whose blocks accumulate gk and gv in turn.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/cpu/attention_rows.h"
#include "backend/cpu/blas_threads.h"
#include "backend/cpu/cpu_loops.h"
#include "backend/cpu/float_kernel.h"
#include "backend/cpu/kernels_attention_packed.h"
#include "backend/cpu/row_math.h"
#include "core/ops/attention.h"
#include "core/ops/op_helpers.h"

namespace kiln::cpu {
namespace {

using namespace attention_rows;

/// Row-major C[m,n] = op(A) op(B) + beta C with leading dimensions, on the
/// calling thread (the kernels hold a SerialBlasScope: their OpenMP loop is
/// the parallelism; single-threaded OpenBLAS beat oneDNN's sgemm on these
/// tiles, 44 vs 66 ms for GPT-2 40M's attention forward).
template <typename T>
void gemmLd(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T beta,
            T* c, int64_t ldc) {
  const auto A = ta ? CblasTrans : CblasNoTrans, B = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, A, B, int(m), int(n), int(k), 1.0f, a, int(lda), b, int(ldb), beta, c, int(ldc));
  else
    cblas_dgemm(CblasRowMajor, A, B, int(m), int(n), int(k), 1.0, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

template <typename T>
void attentionImpl(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const AttentionSetup a(n, in, 0, 3);
  const AttentionGeom& g = a.g;
  const MaskView& mv = a.mask;
  const bool causal = a.causal;
  const T scale = static_cast<T>(a.scale);
  const int64_t br = a.block_rows, blocks = a.blocks, bhs = a.batch_heads;
  const T* q = in[0].data<T>();
  const T* k = in[1].data<T>();
  const T* v = in[2].data<T>();
  T* y = allocAs(n, out, 0, in[0].dtype()).template data<T>();
  T* lse = allocAs(n, out, 1, in[0].dtype()).template data<T>();
  const int64_t qs = g.rowStride(g.E), ks = g.rowStride(g.E), vs = g.rowStride(g.Ev), ys = g.rowStride(g.Ev);
  const SerialBlasScope serial_blas;
#pragma omp parallel
  {
    std::vector<T> tile(static_cast<size_t>(br * g.S));
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t bh = 0; bh < bhs; ++bh)
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t o = bh / g.heads, h = bh % g.heads, t0 = blk * br, rows = std::min(br, g.L - t0);
        const int64_t cols = keysOf(causal, t0 + rows - 1, g.S);
        T* y0 = y + g.offset(o, h, t0, g.L, g.Ev);
        if (cols == 0) {  // no keys at all: softmax of nothing, as the unfused graph gives (NaN)
          for (int64_t r = 0; r < rows; ++r) {
            std::fill(y0 + r * ys, y0 + r * ys + g.Ev, std::numeric_limits<T>::quiet_NaN());
            lse[bh * g.L + t0 + r] = -std::numeric_limits<T>::infinity();
          }
          continue;
        }
        gemmLd<T>(false, true, rows, cols, g.E, q + g.offset(o, h, t0, g.L, g.E), qs, k + g.offset(o, h, 0, g.S, g.E),
                  ks, T(0), tile.data(), cols);
        for (int64_t r = 0; r < rows; ++r) {
          T* row = tile.data() + r * cols;
          prepareRow(row, cols, keysOf(causal, t0 + r, g.S), scale, mv, bh, t0 + r);
          rowSoftmaxInPlace(row, cols, &lse[bh * g.L + t0 + r]);
        }
        gemmLd<T>(false, false, rows, g.Ev, cols, tile.data(), cols, v + g.offset(o, h, 0, g.S, g.Ev), vs, T(0), y0,
                  ys);
      }
  }
}

template <typename T>
void attentionBackwardImpl(const Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
  const AttentionSetup a(n, in, 1, 6);
  const AttentionGeom& g = a.g;
  const MaskView& mv = a.mask;
  const bool causal = a.causal;
  const T scale = static_cast<T>(a.scale);
  const int64_t br = a.block_rows, blocks = a.blocks, bhs = a.batch_heads;
  const T* gy = in[0].data<T>();
  const T* q = in[1].data<T>();
  const T* k = in[2].data<T>();
  const T* v = in[3].data<T>();
  const T* lse = in[5].data<T>();
  T* gq = allocAs(n, out, 0, in[1].dtype()).template data<T>();
  T* gk = allocAs(n, out, 1, in[1].dtype()).template data<T>();
  T* gv = allocAs(n, out, 2, in[1].dtype()).template data<T>();
  const int64_t qs = g.rowStride(g.E), vs = g.rowStride(g.Ev);
  const SerialBlasScope serial_blas;
#pragma omp parallel
  {
    std::vector<T> p(static_cast<size_t>(br * g.S)), gp(static_cast<size_t>(br * g.S));
#pragma omp for schedule(dynamic)
    for (int64_t bh = 0; bh < bhs; ++bh) {
      const int64_t o = bh / g.heads, h = bh % g.heads;
      const T* kb = k + g.offset(o, h, 0, g.S, g.E);
      const T* vb = v + g.offset(o, h, 0, g.S, g.Ev);
      T* gkb = gk + g.offset(o, h, 0, g.S, g.E);
      T* gvb = gv + g.offset(o, h, 0, g.S, g.Ev);
      for (int64_t j = 0; j < g.S; ++j) {
        std::fill(gkb + j * qs, gkb + j * qs + g.E, T(0));
        std::fill(gvb + j * vs, gvb + j * vs + g.Ev, T(0));
      }
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t t0 = blk * br, rows = std::min(br, g.L - t0);
        const int64_t cols = keysOf(causal, t0 + rows - 1, g.S);
        const T* qb = q + g.offset(o, h, t0, g.L, g.E);
        const T* gyb = gy + g.offset(o, h, t0, g.L, g.Ev);
        T* gqb = gq + g.offset(o, h, t0, g.L, g.E);
        if (cols == 0) {
          for (int64_t r = 0; r < rows; ++r) std::fill(gqb + r * qs, gqb + r * qs + g.E, T(0));
          continue;
        }
        gemmLd<T>(false, true, rows, cols, g.E, qb, qs, kb, qs, T(0), p.data(), cols);
        for (int64_t r = 0; r < rows; ++r) {
          T* row = p.data() + r * cols;
          prepareRow(row, cols, keysOf(causal, t0 + r, g.S), scale, mv, bh, t0 + r);
          const T l = lse[bh * g.L + t0 + r];
          if constexpr (std::is_same_v<T, float>)
            rowExpF32(row, row, cols, l);
          else
            for (int64_t j = 0; j < cols; ++j) row[j] = std::exp(row[j] - l);
        }
        gemmLd<T>(true, false, cols, g.Ev, rows, p.data(), cols, gyb, vs, T(1), gvb, vs);  // gv += p^T gy
        gemmLd<T>(false, true, rows, cols, g.Ev, gyb, vs, vb, vs, T(0), gp.data(), cols);  // gp = gy v^T
        for (int64_t r = 0; r < rows; ++r) {
          const T* pr = p.data() + r * cols;
          T* gr = gp.data() + r * cols;
          if constexpr (std::is_same_v<T, float>) {
            rowSoftmaxGradF32(pr, gr, cols, static_cast<float>(rowDotF32(pr, gr, cols)), scale);
          } else {
            double d = 0;
            for (int64_t j = 0; j < cols; ++j) d += static_cast<double>(pr[j]) * gr[j];
            const T dt = static_cast<T>(d);
            for (int64_t j = 0; j < cols; ++j) gr[j] = pr[j] * (gr[j] - dt) * scale;
          }
          zeroHiddenScoreGrads(gr, cols, keysOf(causal, t0 + r, g.S), mv, bh, t0 + r);
        }
        gemmLd<T>(false, false, rows, g.E, cols, gp.data(), cols, kb, qs, T(0), gqb, qs);  // gq = gs k
        gemmLd<T>(true, false, cols, g.E, rows, gp.data(), cols, qb, qs, T(1), gkb, qs);   // gk += gs^T q
      }
    }
  }
}

void attentionBlas(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  dispatchFloat(in[0].dtype(), [&](auto t) { attentionImpl<decltype(t)>(n, in, out); });
}
void attentionBackwardBlas(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext&) {
  dispatchFloat(in[1].dtype(), [&](auto t) { attentionBackwardImpl<decltype(t)>(n, in, out); });
}

/// The packed AVX-512 tiles where the CPU and dtype allow
/// (kernels_attention_packed.cpp), else BLAS tiles in f32 or f64.
void attentionKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext& ctx) {
  if (!attentionPacked(n, in, out)) viaComputeType<attentionBlas>(n, in, out, ctx);
}
void attentionBackwardKernel(const Node& n, std::span<const Tensor> in, std::span<Tensor> out, KernelContext& ctx) {
  if (!attentionBackwardPacked(n, in, out)) viaComputeType<attentionBackwardBlas, 1>(n, in, out, ctx);
}

}  // namespace

void registerCpuAttentionKernels(KernelRegistry& r) {
  r.add({"attention", "cpu", "cpu.attention", 0, nullptr, attentionKernel});
  r.add({"attention_backward", "cpu", "cpu.attention_backward", 0, nullptr, attentionBackwardKernel});
}

}  // namespace kiln::cpu
