// The index and weight tables of nearest and (bi)linear upsampling, shared by
// both importers: each lowers an upsample to Kiln `index` gathers with these
// tables as constant inputs (and, for linear modes, a weighted sum of two
// gathers per dim). They follow PyTorch's CPU kernels (area_pixel_compute_scale,
// nearest_idx, the linear source index with align_corners), in double.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace kiln {

/// PyTorch's area_pixel_compute_scale: source step per output step. `scale`
/// is a given scale factor (out / in); align_corners maps corner to corner.
double resampleSourceScale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale);

/// Nearest upsampling: out[i] = in[min(floor(i * source_scale), in - 1)].
std::vector<int64_t> nearestIndex(int64_t in, int64_t out, std::optional<double> scale);

/// Linear upsampling along one dim: out[i] = in[i0[i]] * w0[i] + in[i1[i]] * w1[i].
struct LinearTaps {
  std::vector<int64_t> i0, i1;
  std::vector<double> w0, w1;
};
LinearTaps linearTaps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale);

/// Bicubic upsampling along one dim (PyTorch's upsample_bicubic2d: Keys'
/// cubic convolution with A = -0.75, taps at floor(src) - 1 .. + 2 clamped to
/// the input, the source index not clamped at 0):
/// out[i] = sum_k in[idx[k][i]] * w[k][i].
struct CubicTaps {
  std::vector<int64_t> idx[4];
  std::vector<double> w[4];
};
CubicTaps cubicTaps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale);

}  // namespace kiln
