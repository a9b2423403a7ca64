// aten -> Kiln: resampling. Nearest and (bi)linear upsampling become Kiln
// `index` gathers with index tensors computed at import time (and, for linear
// modes, a weighted sum of two gathers per dim), following PyTorch's source
// index rules for align_corners and scale factors (core/import/resample_tables.h,
// shared with the FX importer); pixel_shuffle and pixel_unshuffle are
// reshape-permute-reshape.
#include <algorithm>
#include <cmath>

#include "core/import/resample_tables.h"
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

Value* indexConst(Lowering& cx, const std::vector<int64_t>& idx) {
  return cx.constInput(Tensor::fromInt64s({static_cast<int64_t>(idx.size())}, idx));
}

/// Weights of shape [1, .., out, .., 1] along `dim` of a rank-`rank` tensor.
Value* weightConst(Lowering& cx, const std::vector<double>& w, int64_t dim, int64_t rank, DType t) {
  Shape s(static_cast<size_t>(rank), 1);
  s[dim] = static_cast<int64_t>(w.size());
  Tensor tw(t, s);
  for (size_t k = 0; k < w.size(); ++k) tw.set(static_cast<int64_t>(k), w[k]);
  return cx.constInput(tw);
}

// upsample_nearest1d/2d: out[i] = in[min(floor(i * scale), in - 1)]
Out lowerNearest(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  const Shape in = x->shape();
  size_t spatial = a.kiln_op == "1d" ? 1 : 2;
  if (in.size() != spatial + 2) fail("expects a " + std::to_string(spatial + 2) + "-d input, got " + x->type().str());
  Resize r = resizeArgs(a, in, spatial, 2);
  for (size_t k = 0; k < spatial; ++k) {
    int64_t dim = static_cast<int64_t>(2 + k), n_in = in[dim], n_out = r.out[k];
    if (n_in == n_out) continue;
    x = cx.emit("index", {x, indexConst(cx, nearestIndex(n_in, n_out, r.scales[k]))}, {{"dim", dim}});
  }
  return single(cx, x);
}

// upsample_linear1d / upsample_bilinear2d(input, output_size, align_corners, scales...):
// per dim, out = in[i0] * (1 - l) + in[i1] * l
Out lowerLinear(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  if (!isFloating(x->dtype())) fail("linear upsampling needs a floating-point input");
  const Shape in = x->shape();
  size_t spatial = a.kiln_op == "1d" ? 1 : 2;
  if (in.size() != spatial + 2) fail("expects a " + std::to_string(spatial + 2) + "-d input, got " + x->type().str());
  bool align = a.flag(2);
  Resize r = resizeArgs(a, in, spatial, 3);
  int64_t rank = static_cast<int64_t>(in.size());
  for (size_t k = 0; k < spatial; ++k) {
    int64_t dim = static_cast<int64_t>(2 + k), n_in = in[dim], n_out = r.out[k];
    const LinearTaps t = linearTaps(n_in, n_out, align, r.scales[k]);
    Value* g0 = cx.emit("index", {x, indexConst(cx, t.i0)}, {{"dim", dim}});
    Value* g1 = cx.emit("index", {x, indexConst(cx, t.i1)}, {{"dim", dim}});
    x = cx.emit("add", {cx.emit("mul", {g0, weightConst(cx, t.w0, dim, rank, x->dtype())}),
                        cx.emit("mul", {g1, weightConst(cx, t.w1, dim, rank, x->dtype())})});
  }
  return single(cx, x);
}

// pixel_shuffle(self, r): [*, C r r, H, W] -> [*, C, H r, W r]; pixel_unshuffle is the inverse.
Out lowerPixelShuffle(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  const Shape in = x->shape();
  int64_t r = a.integer(1);
  if (in.size() < 3 || r <= 0) fail("expects a tensor with at least 3 dims and a positive factor");
  Shape lead(in.begin(), in.end() - 3);
  auto b = static_cast<int64_t>(lead.size());
  int64_t c = in[b], h = in[b + 1], w = in[b + 2];
  auto with = [&](std::initializer_list<int64_t> tail) {
    Shape s = lead;
    s.insert(s.end(), tail);
    return s;
  };
  std::vector<int64_t> dims;
  for (int64_t k = 0; k < b; ++k) dims.push_back(k);
  Shape split, out;
  if (a.kiln_op == "shuffle") {
    if (c % (r * r)) fail("channels " + std::to_string(c) + " are not divisible by " + std::to_string(r * r));
    split = with({c / (r * r), r, r, h, w});
    for (int64_t d : {0, 3, 1, 4, 2}) dims.push_back(b + d);
    out = with({c / (r * r), h * r, w * r});
  } else {
    if (h % r || w % r) fail("height and width must be divisible by " + std::to_string(r));
    split = with({c, h / r, r, w / r, r});
    for (int64_t d : {0, 2, 4, 1, 3}) dims.push_back(b + d);
    out = with({c * r * r, h / r, w / r});
  }
  Value* y = cx.emit("reshape", {x}, {{"shape", split}});
  y = cx.emit("permute", {y}, {{"dims", dims}});
  return single(cx, cx.emit("reshape", {y}, {{"shape", out}}));
}

const AtenRule kRules[] = {
    {"aten::upsample_nearest1d", lowerNearest, "1d"},      {"aten::upsample_nearest2d", lowerNearest, "2d"},
    {"aten::upsample_linear1d", lowerLinear, "1d"},        {"aten::upsample_bilinear2d", lowerLinear, "2d"},
    {"aten::pixel_shuffle", lowerPixelShuffle, "shuffle"}, {"aten::pixel_unshuffle", lowerPixelShuffle, "unshuffle"},
};

}  // namespace

std::span<const AtenRule> resampleRules() {
  return kRules;
}

}  // namespace kiln::ts
