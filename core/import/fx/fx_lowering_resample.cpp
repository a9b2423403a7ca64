// aten upsampling overloads -> Kiln `index` gathers with constant index
// tables (and, for linear modes, a weighted sum of two gathers per dim), the
// tables from core/import/resample_tables.h as the TorchScript importer
// builds them: upsample_nearest1d/2d and upsample_linear1d/bilinear2d, both
// their .vec overloads (output_size or scale_factors: what F.interpolate
// records) and their .default ones (output_size plus optional scales).
#include <cmath>

#include "core/import/fx/fx_lowering.h"
#include "core/import/resample_tables.h"
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
  } else {  // .default: scales_h / scales_w (2-d) or scales (1-d)
    const char* names2[] = {"scales_h", "scales_w"};
    for (size_t k = 0; k < spatial; ++k) r.scales[k] = a.optReal(spatial == 1 ? "scales" : names2[k]);
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

Value* indexConst(Lowering& cx, const std::vector<int64_t>& idx) {
  return cx.constant(Tensor::fromInt64s({static_cast<int64_t>(idx.size())}, idx));
}

/// Weights of shape [1, .., out, .., 1] along `dim` of a rank-`rank` tensor.
Value* weightConst(Lowering& cx, const std::vector<double>& w, int64_t dim, int64_t rank, DType t) {
  Shape s(static_cast<size_t>(rank), 1);
  s[dim] = static_cast<int64_t>(w.size());
  Tensor tw(t, s);
  for (size_t k = 0; k < w.size(); ++k) tw.set(static_cast<int64_t>(k), w[k]);
  return cx.constant(tw);
}

Value* spatialInput(NodeArgs& a, size_t spatial) {
  Value* x = a.tensor(a.has("input") ? "input" : "self");
  if (x->type().rank() != static_cast<int64_t>(spatial) + 2)
    a.fail(a.has("input") ? "input" : "self", "expected a " + std::to_string(spatial + 2) + "-D tensor, got " + x->type().str());
  return x;
}

/// upsample_nearest1d/2d: out[i] = in[min(floor(i * scale), in - 1)].
FxValue lowerNearest(Lowering& cx, NodeArgs& a) {
  const size_t spatial = a.kiln == "1d" ? 1 : 2;
  Value* x = spatialInput(a, spatial);
  const Shape in = x->shape();
  const Resize r = resizeArgs(a, in, spatial);
  for (size_t k = 0; k < spatial; ++k) {
    const int64_t dim = static_cast<int64_t>(2 + k), n_in = in[dim], n_out = r.out[k];
    if (n_in == n_out) continue;
    x = cx.emit("index", {x, indexConst(cx, nearestIndex(n_in, n_out, r.scales[k]))}, {{"dim", dim}});
  }
  return FxValue::of(x);
}

/// upsample_linear1d / upsample_bilinear2d: per dim, out = in[i0] * w0 + in[i1] * w1.
FxValue lowerLinear(Lowering& cx, NodeArgs& a) {
  const size_t spatial = a.kiln == "1d" ? 1 : 2;
  Value* x = spatialInput(a, spatial);
  if (!isFloating(x->dtype())) a.fail("input", "linear upsampling needs a floating-point tensor, got " + x->type().str());
  const Shape in = x->shape();
  const bool align = a.flag("align_corners");
  const Resize r = resizeArgs(a, in, spatial);
  const int64_t rank = static_cast<int64_t>(in.size());
  for (size_t k = 0; k < spatial; ++k) {
    const int64_t dim = static_cast<int64_t>(2 + k);
    const LinearTaps t = linearTaps(in[dim], r.out[k], align, r.scales[k]);
    Value* g0 = cx.emit("index", {x, indexConst(cx, t.i0)}, {{"dim", dim}});
    Value* g1 = cx.emit("index", {x, indexConst(cx, t.i1)}, {{"dim", dim}});
    x = cx.emit("add", {cx.emit("mul", {g0, weightConst(cx, t.w0, dim, rank, x->dtype())}),
                        cx.emit("mul", {g1, weightConst(cx, t.w1, dim, rank, x->dtype())})});
  }
  return FxValue::of(x);
}

constexpr FxRule kRules[] = {
    {"aten.upsample_nearest1d.default", lowerNearest, "1d"}, {"aten.upsample_nearest1d.vec", lowerNearest, "1d"},
    {"aten.upsample_nearest2d.default", lowerNearest, "2d"}, {"aten.upsample_nearest2d.vec", lowerNearest, "2d"},
    {"aten.upsample_linear1d.default", lowerLinear, "1d"},   {"aten.upsample_linear1d.vec", lowerLinear, "1d"},
    {"aten.upsample_bilinear2d.default", lowerLinear, "2d"}, {"aten.upsample_bilinear2d.vec", lowerLinear, "2d"},
};

}  // namespace

std::span<const FxRule> resampleRules() { return kRules; }

}  // namespace kiln::fx
