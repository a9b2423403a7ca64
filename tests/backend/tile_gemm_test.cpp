// The attention kernels' tile GEMMs (backend/cpu/tile_gemm.h) against a
// double-precision reference on the same (bf16-rounded) operands: every
// micro-kernel shape (1..6 rows, 1..4 vectors, partial last vectors), odd k
// (bf16's half pair), strided and transposed packing, a leading part of B
// (n < b.n, k < b.k), accumulation, and columns past n left untouched.
// Skips visibly on CPUs without AVX-512 (or AVX512_BF16 for bf16).
#include "backend/cpu/tile_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace kiln::cpu {
namespace {

template <typename T>
struct TileCase {
  int64_t m, n, k;          // the product computed
  int64_t bn, bk;           // the packed B's size (>= n, k)
  bool transposed_b;        // B packed from a [bn, bk] matrix
  bool accumulate;
};

template <typename T>
void runTile(const TileCase<T>& tc, double rel_tol) {
  std::mt19937 rng(static_cast<unsigned>(tc.m * 131 + tc.n * 7 + tc.k));
  std::normal_distribution<float> dist;
  const int64_t lda = tc.k + 3;  // rows not contiguous with each other
  std::vector<T> a(static_cast<size_t>(tc.m * lda));
  for (auto& x : a) x = T(dist(rng));
  std::vector<T> bsrc(static_cast<size_t>(tc.bk * tc.bn));
  for (auto& x : bsrc) x = T(dist(rng));
  // Logical B(kk, nn): bsrc[kk * bn + nn], or bsrc[nn * bk + kk] when transposed.
  auto bAt = [&](int64_t kk, int64_t nn) {
    return static_cast<float>(tc.transposed_b ? bsrc[size_t(nn * tc.bk + kk)] : bsrc[size_t(kk * tc.bn + nn)]);
  };
  PackedB<T> b;
  if (tc.transposed_b)
    b.pack(bsrc.data(), tc.bk, tc.bn, 1, tc.bk);
  else
    b.pack(bsrc.data(), tc.bk, tc.bn, tc.bn, 1);

  const int64_t ldc = tc.n + 5;
  std::vector<float> c(static_cast<size_t>(tc.m * ldc));
  for (auto& x : c) x = dist(rng);
  const std::vector<float> c0 = c;
  tileGemm(a.data(), lda, b, tc.m, tc.n, tc.k, c.data(), ldc, tc.accumulate);

  for (int64_t i = 0; i < tc.m; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t at = size_t(i * ldc + j);
      if (j >= tc.n) {
        ASSERT_EQ(c[at], c0[at]) << "column " << j << " past n = " << tc.n << " was written";
        continue;
      }
      double ref = tc.accumulate ? c0[at] : 0.0, mag = std::fabs(ref);
      for (int64_t kk = 0; kk < tc.k; ++kk) {
        const double p = static_cast<double>(static_cast<float>(a[size_t(i * lda + kk)])) * bAt(kk, j);
        ref += p;
        mag += std::fabs(p);
      }
      ASSERT_NEAR(c[at], ref, rel_tol * (mag + 1e-30))
          << "C[" << i << "," << j << "] of m " << tc.m << " n " << tc.n << " k " << tc.k;
    }
}

template <typename T>
void runShapes(double tol) {
  // Every row count 1..13 (two strips of 6 and a remainder) against column
  // counts that end on each vector count and mid-vector.
  for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 13})
    for (int64_t n : {1, 16, 17, 33, 48, 64, 65, 100, 130}) runTile<T>({m, n, 64, n, 64, false, false}, tol);
  for (int64_t k : {1, 2, 3, 7, 63, 64, 65, 200}) {
    runTile<T>({7, 40, k, 40, k, true, false}, tol);
    runTile<T>({6, 64, k, 70, k + 5, false, true}, tol);  // leading part of B, accumulate
  }
  runTile<T>({30, 197, 64, 197, 64, true, true}, tol);  // a ViT-sized tile of scores
  runTile<T>({12, 64, 131, 64, 256, false, false}, tol);  // a causal block's first 131 keys
}

TEST(TileGemm, F32MatchesDoubleReference) {
  if (!tileGemmAvailable<float>()) GTEST_SKIP() << "no AVX-512 on this CPU: the attention kernels use BLAS";
  runShapes<float>(1e-6);
}

TEST(TileGemm, Bf16MatchesDoubleReference) {
  if (!tileGemmAvailable<BFloat16>())
    GTEST_SKIP() << "no AVX512_BF16 on this CPU: bf16 attention computes in f32 through BLAS";
  // The products of bf16 values are exact in f32; only the f32 sums round.
  runShapes<BFloat16>(1e-6);
}

}  // namespace
}  // namespace kiln::cpu
