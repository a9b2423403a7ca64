// Small GEMMs on one thread for kernels that tile their own work (the fused
// attention kernels): C[m, n] (f32) = A[m, k] B (+ C), with A row-major
// (k contiguous) and B packed once, reused by every block of rows.
//
// Why not BLAS: attention's tiles are K = 64 deep and are called thousands
// of times per step; single-threaded OpenBLAS packs both operands on every
// call and ran them at 65-78 GFLOP/s of the machine's 205 (f32), and
// oneDNN 2.6 has no bf16 GEMM callable per tile. Here B (keys, values, a
// block of queries or output gradients) is packed once per head or block,
// and AVX-512 micro-kernels (6 rows x 64 columns of accumulators) stream
// it: vfmadd231ps for f32, vdpbf16ps (AVX512_BF16: bf16 pairs, f32 sums)
// for bf16. tileGemmAvailable says whether this CPU has them; callers keep
// their BLAS path for the rest.
#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_loops.h"

namespace kiln::cpu {

/// True when this CPU runs the tile GEMMs of element type T (float:
/// AVX512F; BFloat16: AVX512F + AVX512_BF16), detected once at run time.
template <typename T>
bool tileGemmAvailable();

/// The B operand, packed for the micro-kernels. Element (kk, nn) of the
/// logical [k, n] matrix sits at data[(kk / P) * n_pad * P + nn * P + kk % P]
/// with P = 2 for bf16 (pairs along k, as vdpbf16ps reads them) and 1 for
/// f32; columns past n (up to n_pad, a multiple of 16) and a bf16 pair's
/// missing half past an odd k are zero.
template <typename T>
struct PackedB {
  static constexpr int64_t kPair = std::is_same_v<T, float> ? 1 : 2;
  std::vector<T> data;
  int64_t k = 0, n = 0, n_pad = 0;

  /// Pack the [k, n] matrix whose element (kk, nn) is src[kk * sk + nn * sn]
  /// (any strides: a matrix or its transpose). Reuses the buffer.
  void pack(const T* src, int64_t k, int64_t n, int64_t sk, int64_t sn);
};

/// C[m, 0:n] = A[m, 0:k] B[0:k, 0:n] (+ C[m, 0:n] when accumulate), f32
/// sums. A's rows start lda elements apart; k <= b.k and n <= b.n use a
/// leading part of B (a causal block's first keys). Writes only columns
/// [0, n) of C. Requires tileGemmAvailable<T>().
void tileGemm(const float* a, int64_t lda, const PackedB<float>& b, int64_t m, int64_t n, int64_t k, float* c,
              int64_t ldc, bool accumulate);
void tileGemm(const BFloat16* a, int64_t lda, const PackedB<BFloat16>& b, int64_t m, int64_t n, int64_t k, float* c,
              int64_t ldc, bool accumulate);

}  // namespace kiln::cpu
