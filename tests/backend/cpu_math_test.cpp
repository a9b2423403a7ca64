// The vectorizable float exp, tanh and erf of backend/cpu/cpu_math.h against
// libm in double, over a dense sweep of float inputs and the edge values
// (signed zeros, infinities, NaN, saturation). The kernels that use them
// are compared with PyTorch in the torch tests; this pins the ulp bound.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "backend/cpu/cpu_math.h"

namespace kiln::cpu {
namespace {

/// Distance from `got` to the exact `want` in units of float's spacing at `want`.
double ulps(float got, double want) {
  const float w = static_cast<float>(want);
  const double spacing = std::fabs(std::nextafter(w, std::numeric_limits<float>::infinity()) - w);
  return std::fabs(got - want) / spacing;
}

template <class F, class Exact>
double maxUlps(F f, Exact exact, float lo, float hi) {
  double worst = 0;
  for (float x = lo; x < hi; x += std::max(1e-6f, std::fabs(x) * 1e-5f))
    worst = std::max(worst, ulps(f(x), exact(static_cast<double>(x))));
  return worst;
}

TEST(CpuMath, TanhIsWithinTwoUlps) {
  EXPECT_LE(maxUlps(
                tanhVec, [](double x) { return std::tanh(x); }, -20.0f, 20.0f),
            2.0);
}

TEST(CpuMath, ExpIsWithinTwoUlps) {
  EXPECT_LE(maxUlps(
                expVec, [](double x) { return std::exp(x); }, -87.0f, 88.0f),
            2.0);
}

TEST(CpuMath, TanhEdgeValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::signbit(tanhVec(-0.0f)));
  EXPECT_EQ(tanhVec(0.0f), 0.0f);
  EXPECT_EQ(tanhVec(1e-30f), 1e-30f);
  EXPECT_EQ(tanhVec(100.0f), 1.0f);
  EXPECT_EQ(tanhVec(-100.0f), -1.0f);
  EXPECT_EQ(tanhVec(inf), 1.0f);
  EXPECT_EQ(tanhVec(-inf), -1.0f);
  EXPECT_TRUE(std::isnan(tanhVec(std::numeric_limits<float>::quiet_NaN())));
}

TEST(CpuMath, ExpEdgeValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(expVec(0.0f), 1.0f);
  EXPECT_EQ(expVec(-inf), 0.0f);
  EXPECT_EQ(expVec(inf), inf);
  EXPECT_EQ(expVec(100.0f), inf);
  EXPECT_TRUE(std::isnan(expVec(std::numeric_limits<float>::quiet_NaN())));
}

// erfVec is PyTorch's approximation (Abramowitz & Stegun 7.1.26, 1.5e-7 in
// exact arithmetic; 5.1e-7 measured in float, as PyTorch's): an absolute
// bound, not an ulp one.
TEST(CpuMath, ErfIsWithinItsAbsoluteBound) {
  double worst = 0;
  for (float x = -6.0f; x < 6.0f; x += 1e-4f) worst = std::max(worst, std::fabs(erfVec(x) - std::erf(double(x))));
  EXPECT_LT(worst, 1e-6);
}

TEST(CpuMath, ErfEdgeValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(erfVec(inf), 1.0f);
  EXPECT_EQ(erfVec(-inf), -1.0f);
  EXPECT_EQ(erfVec(30.0f), 1.0f);
  EXPECT_LT(std::fabs(erfVec(0.0f)), 1e-8f);
  EXPECT_LE(erfVec(-1e-30f), 0.0f);
  EXPECT_TRUE(std::isnan(erfVec(std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace
}  // namespace kiln::cpu
