#include "core/tensor_compare.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kiln {

double parityError(const Tensor& actual, const Tensor& expected) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (actual.type() != expected.type()) return kInf;
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    double x = actual.at(i), y = expected.at(i);
    if (std::isfinite(y)) scale = std::max(scale, std::fabs(y));
    if (x == y || (std::isnan(x) && std::isnan(y))) continue;
    double d = std::fabs(x - y);
    if (!std::isfinite(d)) return kInf;
    diff = std::max(diff, d);
  }
  return scale > 0 ? diff / scale : diff;
}

}  // namespace kiln
