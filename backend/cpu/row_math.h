// Vectorized loops over one contiguous f32 row: the max / sum-of-exp /
// scale steps that softmax, log-softmax, cross-entropy and attention repeat
// per row. Each is compiled for AVX2+FMA and for the baseline
// (KILN_SIMD_CLONES) and keeps 16 float partial sums, so a row of C
// elements costs about C / 16 vector exps instead of C libm calls (a
// [1024, 32000] cross-entropy took 112 ms with scalar double exp). Sums run
// in float lanes and combine in double, as PyTorch's vectorized softmax
// accumulates in float vectors.
#pragma once

#include <cstdint>
#include <limits>

namespace kiln::cpu {

struct BFloat16;  // backend/cpu/cpu_loops.h

/// max over x[0, n); -inf for n == 0. NaNs are skipped here; callers still
/// see them through the sum of exp, as the scalar loops did.
float rowMaxF32(const float* x, int64_t n);

/// sum over i of exp(x[i] - shift).
double rowSumExpF32(const float* x, int64_t n, float shift);

/// y[i] = exp(x[i] - shift) (y may be x); returns the sum of the y[i].
double rowExpF32(const float* x, float* y, int64_t n, float shift);

/// y[i] = y[i] * a + b.
void rowAffineF32(float* y, int64_t n, float a, float b);

/// y[i] = x[i] widened to float (exact), and rounded back to bf16 (nearest
/// even, as the cast kernel): bf16 rows go through the f32 loops above in
/// a row buffer that stays in cache, with the same bits as over a widened
/// copy of the whole tensor.
void rowFromBf16(const BFloat16* x, float* y, int64_t n);
void rowToBf16(const float* x, BFloat16* y, int64_t n);

/// sum over i of a[i] * b[i] (float lanes, combined in double).
double rowDotF32(const float* a, const float* b, int64_t n);

/// g[i] = p[i] * (g[i] - d) * scale: softmax's backward over a row, given
/// d = sum p g (attention scales it by the score scale too).
void rowSoftmaxGradF32(const float* p, float* g, int64_t n, float d, float scale);

/// The shift softmax subtracts: the row's max, or 0 when it is -inf (all
/// masked rows then give exp(-inf) = 0 instead of NaN from -inf - -inf).
inline float softmaxShift(float mx) {
  return mx == -std::numeric_limits<float>::infinity() ? 0.0f : mx;
}

}  // namespace kiln::cpu
