// aten upsampling overloads -> Kiln `index` gathers with constant index
// tables (and, for linear modes, a weighted sum of two gathers per dim),
// emitted by core/import/decompositions/resample.h as for the TorchScript importer:
// upsample_nearest1d/2d and upsample_linear1d/bilinear2d, both their .vec
// overloads (output_size or scale_factors: what F.interpolate records) and
// their .default ones (output_size plus optional scales); pixel_shuffle and
// pixel_unshuffle.
#include <cmath>

#include "core/import/decompositions/resample.h"
#include "core/import/fx/fx_lowering.h"
#include "core/result.h"

namespace kiln::fx {
namespace {

/// Output sizes and the given scale factors (out / in) of the spatial dims.
struct Resize {
  std::vector<int64_t> out;
  std::vector<std::optional<double>> scales;
};

Resize resizeArgs(NodeArgs& a, const Shape& in, size_t spatial) {
  Resize r;
  r.scales.assign(spatial, std::nullopt);
  if (a.has("scale_factors")) {  // .vec
    if (a.given("scale_factors")) {
      const FxArg& f = a.arg("scale_factors");
      if (f.items.size() != 1 && f.items.size() != spatial)
        a.fail("scale_factors", "expected " + std::to_string(spatial) + " values");
      for (size_t k = 0; k < spatial; ++k) {
        const FxArg& v = f.items[f.items.size() == 1 ? 0 : k];
        if (!v.isNumber()) a.fail("scale_factors", "expected numbers, got " + argKindName(v.kind));
        r.scales[k] = v.kind == FxArg::Kind::Float ? v.f : static_cast<double>(v.i);
      }
    }
  } else {  // .default: scales (1-d), scales_h / scales_w (2-d), scales_d / scales_h / scales_w (3-d)
    const char* names2[] = {"scales_h", "scales_w"};
    const char* names3[] = {"scales_d", "scales_h", "scales_w"};
    for (size_t k = 0; k < spatial; ++k)
      r.scales[k] = a.optReal(spatial == 1 ? "scales" : spatial == 2 ? names2[k] : names3[k]);
  }
  const char* size_arg = a.has("output_size") ? "output_size" : "size";
  if (a.given(size_arg)) {
    r.out = a.ints(size_arg);
  } else {
    for (size_t k = 0; k < spatial; ++k) {
      if (!r.scales[k]) a.fail(size_arg, "upsampling needs an output size or scale factors");
      r.out.push_back(static_cast<int64_t>(std::floor(static_cast<double>(in[in.size() - spatial + k]) * *r.scales[k])));
    }
  }
  if (r.out.size() != spatial) a.fail(size_arg, "must have " + std::to_string(spatial) + " entries");
  for (int64_t o : r.out)
    if (o <= 0 || o > kMaxWindow) a.fail(size_arg, "output sizes must be in [1, 2^20], got " + shapeStr(r.out));
  return r;
}

Value* spatialInput(NodeArgs& a, size_t spatial) {
  Value* x = a.tensor(a.has("input") ? "input" : "self");
  if (x->type().rank() != static_cast<int64_t>(spatial) + 2)
    a.fail(a.has("input") ? "input" : "self", "expected a " + std::to_string(spatial + 2) + "-D tensor, got " + x->type().str());
  return x;
}

/// 1, 2 or 3 spatial dims: the rule's "1d" / "2d" / "3d".
size_t spatialDims(const NodeArgs& a) { return a.kiln == "1d" ? 1 : a.kiln == "3d" ? 3 : 2; }

/// upsample_nearest1d/2d/3d: out[i] = in[min(floor(i * scale), in - 1)].
FxValue lowerNearest(Lowering& cx, NodeArgs& a) {
  const size_t spatial = spatialDims(a);
  Value* x = spatialInput(a, spatial);
  const Resize r = resizeArgs(a, x->shape(), spatial);
  return FxValue::of(decomp::upsampleNearest(cx, x, r.out, r.scales));
}

/// upsample_linear1d / bilinear2d / trilinear3d: per dim, out = in[i0] * w0 + in[i1] * w1.
FxValue lowerLinear(Lowering& cx, NodeArgs& a) {
  const size_t spatial = spatialDims(a);
  Value* x = spatialInput(a, spatial);
  if (!isFloating(x->dtype())) a.fail("input", "linear upsampling needs a floating-point tensor, got " + x->type().str());
  const Resize r = resizeArgs(a, x->shape(), spatial);
  return FxValue::of(decomp::upsampleLinear(cx, x, r.out, r.scales, a.flag("align_corners")));
}

/// upsample_bicubic2d (.vec and .default): Keys' cubic convolution, A = -0.75.
FxValue lowerCubic(Lowering& cx, NodeArgs& a) {
  Value* x = spatialInput(a, 2);
  if (!isFloating(x->dtype())) a.fail("input", "bicubic upsampling needs a floating-point tensor, got " + x->type().str());
  const Resize r = resizeArgs(a, x->shape(), 2);
  return FxValue::of(decomp::upsampleCubic(cx, x, r.out, r.scales, a.flag("align_corners")));
}

FxValue lowerPixelShuffle(Lowering& cx, NodeArgs& a) {
  const bool shuffle = a.kiln == "shuffle";
  return FxValue::of(
      decomp::pixelShuffle(cx, a.tensor("self"), a.integer(shuffle ? "upscale_factor" : "downscale_factor"), shuffle));
}

constexpr FxRule kRules[] = {
    {"aten.pixel_shuffle.default", lowerPixelShuffle, "shuffle"},
    {"aten.pixel_unshuffle.default", lowerPixelShuffle, "unshuffle"},
    {"aten.upsample_nearest1d.default", lowerNearest, "1d"}, {"aten.upsample_nearest1d.vec", lowerNearest, "1d"},
    {"aten.upsample_nearest2d.default", lowerNearest, "2d"}, {"aten.upsample_nearest2d.vec", lowerNearest, "2d"},
    {"aten.upsample_linear1d.default", lowerLinear, "1d"},   {"aten.upsample_linear1d.vec", lowerLinear, "1d"},
    {"aten.upsample_bilinear2d.default", lowerLinear, "2d"}, {"aten.upsample_bilinear2d.vec", lowerLinear, "2d"},
    {"aten.upsample_nearest3d.default", lowerNearest, "3d"}, {"aten.upsample_nearest3d.vec", lowerNearest, "3d"},
    {"aten.upsample_trilinear3d.default", lowerLinear, "3d"}, {"aten.upsample_trilinear3d.vec", lowerLinear, "3d"},
    {"aten.upsample_bicubic2d.default", lowerCubic},         {"aten.upsample_bicubic2d.vec", lowerCubic},
};

}  // namespace

std::span<const FxRule> resampleRules() { return kRules; }

}  // namespace kiln::fx
