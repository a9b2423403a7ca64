#include "backend/cpu/norm_rows_bf16.h"

#include <algorithm>
#include <cmath>

namespace kiln::cpu {

namespace {

constexpr int kLanes = 16;

/// sum over i in [0, n) of f(i) in float lanes, flushed into double every
/// kNormFlush elements; the lanes combine pairwise.
template <class F>
[[gnu::always_inline]] inline double laneSum(int64_t n, F f) {
  double total = 0;
  for (int64_t start = 0; start < n; start += kNormFlush) {
    const int64_t end = std::min(n, start + kNormFlush);
    float lane[kLanes] = {};
    int64_t i = start;
    for (; i + kLanes <= end; i += kLanes)
      for (int j = 0; j < kLanes; ++j) lane[j] += f(i + j);
    for (; i < end; ++i) lane[0] += f(i);
    for (int w = kLanes / 2; w > 0; w /= 2)
      for (int j = 0; j < w; ++j) lane[j] += lane[j + w];
    total += lane[0];
  }
  return total;
}

[[gnu::always_inline]] inline float widen(uint16_t v) {
  return bf16ToFloat(v);
}

/// The storage of bf16 elements, as the loops below read them.
const uint16_t* bits(const BFloat16* p) {
  return reinterpret_cast<const uint16_t*>(p);
}
uint16_t* bits(BFloat16* p) {
  return reinterpret_cast<uint16_t*>(p);
}

KILN_SIMD_CLONES double rowSumBf16(const uint16_t* x, int64_t n, float shift) {
  return laneSum(n, [&](int64_t i) { return widen(x[i]) - shift; });
}

KILN_SIMD_CLONES double rowSqDevBf16(const uint16_t* x, int64_t n, float mean) {
  return laneSum(n, [&](int64_t i) {
    const float d = widen(x[i]) - mean;
    return d * d;
  });
}

KILN_SIMD_CLONES void rowGradSumsBf16(const uint16_t* g, const uint16_t* x, int64_t n, float mean, double* sum_g,
                                      double* dot) {
  // Two sums in one pass: the run is read once for both.
  for (int64_t start = 0; start < n; start += kNormFlush) {
    const int64_t end = std::min(n, start + kNormFlush);
    float sg[kLanes] = {}, sd[kLanes] = {};
    int64_t i = start;
    for (; i + kLanes <= end; i += kLanes)
      for (int j = 0; j < kLanes; ++j) {
        const float gv = widen(g[i + j]);
        sg[j] += gv;
        sd[j] += gv * (widen(x[i + j]) - mean);
      }
    for (; i < end; ++i) {
      const float gv = widen(g[i]);
      sg[0] += gv;
      sd[0] += gv * (widen(x[i]) - mean);
    }
    for (int w = kLanes / 2; w > 0; w /= 2)
      for (int j = 0; j < w; ++j) sg[j] += sg[j + w], sd[j] += sd[j + w];
    *sum_g += sg[0];
    *dot += sd[0];
  }
}

KILN_SIMD_CLONES void rowAffineBf16(const uint16_t* __restrict x, uint16_t* __restrict y, int64_t n, float scale,
                                    float shift) {
  for (int64_t i = 0; i < n; ++i) y[i] = floatToBf16(widen(x[i]) * scale + shift);
}

KILN_SIMD_CLONES void rowNormGradBf16(const uint16_t* __restrict g, const uint16_t* __restrict x,
                                      uint16_t* __restrict gx, int64_t n, float grad_mean, float mean, float k,
                                      float scale) {
  for (int64_t i = 0; i < n; ++i) gx[i] = floatToBf16((widen(g[i]) - grad_mean - (widen(x[i]) - mean) * k) * scale);
}

}  // namespace

std::pair<double, double> moments(const BFloat16* xs, int64_t groups, int64_t run, int64_t stride) {
  const double count = static_cast<double>(groups * run);
  if (count == 0) return {0.0, std::nan("")};
  const uint16_t* x = bits(xs);
  // Shifting by a sample keeps the float partial sums near zero.
  const float shift = widen(x[0]);
  double s = 0;
  for (int64_t g = 0; g < groups; ++g) s += rowSumBf16(x + g * stride, run, shift);
  const double mean = shift + s / count;
  const float m = static_cast<float>(mean);
  double sq = 0;
  for (int64_t g = 0; g < groups; ++g) sq += rowSqDevBf16(x + g * stride, run, m);
  // The deviations were taken from m, not mean: sum (x - m)^2 = sum (x - mean)^2 + count (mean - m)^2.
  const double off = mean - static_cast<double>(m);
  return {mean, std::max(0.0, sq / count - off * off)};
}

std::pair<double, double> gradSums(const BFloat16* g, const BFloat16* x, int64_t groups, int64_t run, int64_t stride,
                                   double mean) {
  const auto m = static_cast<float>(mean);
  double sum_g = 0, dot = 0;
  for (int64_t b = 0; b < groups; ++b)
    rowGradSumsBf16(bits(g + b * stride), bits(x + b * stride), run, m, &sum_g, &dot);
  // The products were taken against m: sum g (x - mean) = sum g (x - m) - (mean - m) sum g.
  return {sum_g, dot - (mean - static_cast<double>(m)) * sum_g};
}

void affineRun(const BFloat16* x, BFloat16* y, int64_t n, float scale, float shift) {
  rowAffineBf16(bits(x), bits(y), n, scale, shift);
}

void normGradRun(const BFloat16* g, const BFloat16* x, BFloat16* gx, int64_t n, float grad_mean, float mean, float k,
                 float scale) {
  rowNormGradBf16(bits(g), bits(x), bits(gx), n, grad_mean, mean, k, scale);
}

}  // namespace kiln::cpu
