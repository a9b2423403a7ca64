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

}  // namespace kiln
