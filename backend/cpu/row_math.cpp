#include "backend/cpu/row_math.h"

#include <limits>

#include "backend/cpu/cpu_loops.h"
#include "backend/cpu/cpu_math.h"

namespace kiln::cpu {

namespace {
constexpr int kLanes = 16;
}  // namespace

KILN_SIMD_CLONES_512 float rowMaxF32(const float* x, int64_t n) {
  float lane[kLanes];
  for (float& l : lane) l = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
  float mx = -std::numeric_limits<float>::infinity();
  for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  for (float l : lane) mx = l > mx ? l : mx;
  return mx;
}

KILN_SIMD_CLONES_512 double rowSumExpF32(const float* x, int64_t n, float shift) {
  float lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lane[j] += expVec(x[i + j] - shift);
  double sum = 0;
  for (; i < n; ++i) sum += expVec(x[i] - shift);
  for (float l : lane) sum += l;
  return sum;
}

KILN_SIMD_CLONES_512 double rowExpF32(const float* x, float* y, int64_t n, float shift) {
  float lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const float e = expVec(x[i + j] - shift);
      y[i + j] = e;
      lane[j] += e;
    }
  double sum = 0;
  for (; i < n; ++i) {
    y[i] = expVec(x[i] - shift);
    sum += y[i];
  }
  for (float l : lane) sum += l;
  return sum;
}

KILN_SIMD_CLONES_512 void rowFromBf16(const BFloat16* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16ToFloat(x[i].bits);
}

KILN_SIMD_CLONES_512 void rowToBf16(const float* x, BFloat16* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i].bits = floatToBf16(x[i]);
}

KILN_SIMD_CLONES_512 void rowAffineF32(float* y, int64_t n, float a, float b) {
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] * a + b;
}

KILN_SIMD_CLONES_512 double rowDotF32(const float* a, const float* b, int64_t n) {
  float lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lane[j] += a[i + j] * b[i + j];
  double sum = 0;
  for (; i < n; ++i) sum += static_cast<double>(a[i]) * b[i];
  for (float l : lane) sum += l;
  return sum;
}

KILN_SIMD_CLONES_512 void rowSoftmaxGradF32(const float* p, float* g, int64_t n, float d, float scale) {
  for (int64_t i = 0; i < n; ++i) g[i] = p[i] * (g[i] - d) * scale;
}

}  // namespace kiln::cpu
