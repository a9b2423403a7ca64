#include "core/import/resample_tables.h"

#include <algorithm>
#include <cmath>

namespace kiln {

double resampleSourceScale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (align_corners) return out > 1 ? static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;
  if (scale && *scale > 0) return 1.0 / *scale;
  return static_cast<double>(in) / static_cast<double>(out);
}

std::vector<int64_t> nearestIndex(int64_t in, int64_t out, std::optional<double> scale) {
  const double s = resampleSourceScale(in, out, false, scale);
  std::vector<int64_t> idx(static_cast<size_t>(out));
  for (int64_t i = 0; i < out; ++i)
    idx[i] = std::min(static_cast<int64_t>(std::floor(static_cast<double>(i) * s)), in - 1);
  return idx;
}

LinearTaps linearTaps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  const double s = resampleSourceScale(in, out, align_corners, scale);
  LinearTaps t;
  t.i0.resize(out);
  t.i1.resize(out);
  t.w0.resize(out);
  t.w1.resize(out);
  for (int64_t i = 0; i < out; ++i) {
    const double src =
        align_corners ? static_cast<double>(i) * s : std::max(0.0, (static_cast<double>(i) + 0.5) * s - 0.5);
    const int64_t lo = std::min(static_cast<int64_t>(std::floor(src)), in - 1);
    t.i0[i] = lo;
    t.i1[i] = std::min(lo + 1, in - 1);
    t.w1[i] = src - static_cast<double>(lo);
    t.w0[i] = 1.0 - t.w1[i];
  }
  return t;
}

CubicTaps cubicTaps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  const double s = resampleSourceScale(in, out, align_corners, scale);
  constexpr double A = -0.75;
  auto near = [](double x) { return ((A + 2) * x - (A + 3)) * x * x + 1; };     // |x| <= 1
  auto far = [](double x) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; };  // 1 < |x| < 2
  CubicTaps c;
  for (int k = 0; k < 4; ++k) {
    c.idx[k].resize(out);
    c.w[k].resize(out);
  }
  for (int64_t i = 0; i < out; ++i) {
    const double src = align_corners ? static_cast<double>(i) * s : (static_cast<double>(i) + 0.5) * s - 0.5;
    const double fl = std::floor(src);
    const double t = src - fl;
    const double w[4] = {far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)};
    for (int k = 0; k < 4; ++k) {
      c.idx[k][i] = std::clamp(static_cast<int64_t>(fl) - 1 + k, int64_t{0}, in - 1);
      c.w[k][i] = w[k];
    }
  }
  return c;
}

}  // namespace kiln
