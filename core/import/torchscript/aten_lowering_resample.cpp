// aten -> Kiln: resampling. Nearest and (bi)linear upsampling become Kiln
// `index` gathers with index tensors computed at import time (and, for linear
// modes, a weighted sum of two gathers per dim), following PyTorch's source
// index rules for align_corners and scale factors (core/import/resample_tables.h,
// shared with the FX importer); pixel_shuffle and pixel_unshuffle are
// reshape-permute-reshape.
#include <algorithm>
#include <cmath>

#include "core/import/decompositions/resample.h"
#include "core/import/torchscript/lowering.h"
#include "core/result.h"

namespace kiln::ts {
namespace {

using Out = std::vector<SV>;

/// Output sizes and scales of upsample_*(input, output_size?, scale_factors?) (the .vec
/// overloads) or upsample_*(self, output_size, [align_corners,] scales...).
struct Resize {
  std::vector<int64_t> out;
  std::vector<std::optional<double>> scales;  ///< given scale factors (out / in), per dim
};

Resize resizeArgs(const Args& a, const Shape& in, size_t spatial, size_t scales_at) {
  Resize r;
  r.scales.assign(spatial, std::nullopt);
  bool vec = a.size() > scales_at && a[scales_at].kind == SV::Kind::List;
  if (vec || (a.size() == scales_at + 1 && !a.given(scales_at))) {
    if (a.given(scales_at)) {
      const auto& f = a[scales_at].elems();
      for (size_t k = 0; k < spatial; ++k) r.scales[k] = f.at(f.size() == 1 ? 0 : k).number();
    }
  } else {
    for (size_t k = 0; k < spatial; ++k) r.scales[k] = a.optReal(scales_at + k);
  }
  if (a.given(1)) {
    r.out = a.ints(1);
  } else {
    for (size_t k = 0; k < spatial; ++k) {
      if (!r.scales[k]) fail("upsampling needs an output size or scale factors");
      r.out.push_back(
          static_cast<int64_t>(std::floor(static_cast<double>(in[in.size() - spatial + k]) * *r.scales[k])));
    }
  }
  if (r.out.size() != spatial) fail("output size must have " + std::to_string(spatial) + " entries");
  return r;
}

/// 1, 2 or 3 spatial dims: the rule's "1d" / "2d" / "3d".
size_t spatialDims(const Args& a) { return a.kiln_op == "1d" ? 1 : a.kiln_op == "3d" ? 3 : 2; }

// upsample_nearest1d/2d/3d: out[i] = in[min(floor(i * scale), in - 1)]
Out lowerNearest(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  size_t spatial = spatialDims(a);
  if (x->type().rank() != static_cast<int64_t>(spatial) + 2)
    fail("expects a " + std::to_string(spatial + 2) + "-d input, got " + x->type().str());
  Resize r = resizeArgs(a, x->shape(), spatial, 2);
  return single(cx, decomp::upsampleNearest(cx, x, r.out, r.scales));
}

// upsample_linear1d / bilinear2d / trilinear3d(input, output_size, align_corners, scales...):
// per dim, out = in[i0] * (1 - l) + in[i1] * l
Out lowerLinear(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  if (!isFloating(x->dtype())) fail("linear upsampling needs a floating-point input");
  size_t spatial = spatialDims(a);
  if (x->type().rank() != static_cast<int64_t>(spatial) + 2)
    fail("expects a " + std::to_string(spatial + 2) + "-d input, got " + x->type().str());
  Resize r = resizeArgs(a, x->shape(), spatial, 3);
  return single(cx, decomp::upsampleLinear(cx, x, r.out, r.scales, a.flag(2)));
}

// upsample_bicubic2d(input, output_size, align_corners, scales_h, scales_w) and its .vec form
Out lowerCubic(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  if (!isFloating(x->dtype())) fail("bicubic upsampling needs a floating-point input");
  if (x->type().rank() != 4) fail("expects a 4-d input, got " + x->type().str());
  Resize r = resizeArgs(a, x->shape(), 2, 3);
  return single(cx, decomp::upsampleCubic(cx, x, r.out, r.scales, a.flag(2)));
}

// pixel_shuffle(self, r): [*, C r r, H, W] -> [*, C, H r, W r]; pixel_unshuffle is the inverse.
Out lowerPixelShuffle(Lowering& cx, Args& a) {
  return single(cx, decomp::pixelShuffle(cx, a.tensor(0), a.integer(1), a.kiln_op == "shuffle"));
}

const AtenRule kRules[] = {
    {"aten::upsample_nearest1d", lowerNearest, "1d"},      {"aten::upsample_nearest2d", lowerNearest, "2d"},
    {"aten::upsample_linear1d", lowerLinear, "1d"},        {"aten::upsample_bilinear2d", lowerLinear, "2d"},
    {"aten::upsample_bicubic2d", lowerCubic},
    {"aten::upsample_nearest3d", lowerNearest, "3d"},      {"aten::upsample_trilinear3d", lowerLinear, "3d"},
    {"aten::pixel_shuffle", lowerPixelShuffle, "shuffle"}, {"aten::pixel_unshuffle", lowerPixelShuffle, "unshuffle"},
};

}  // namespace

std::span<const AtenRule> resampleRules() {
  return kRules;
}

}  // namespace kiln::ts
