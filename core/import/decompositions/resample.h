// Shared decompositions (see common.h): nearest, (bi/tri)linear and bicubic
// resizing as index gathers over tables computed at import time
// (core/import/resample_tables.h), pixel shuffle and unshuffle.
#pragma once

#include <optional>
#include <vector>

#include "core/import/decompositions/common.h"
#include "core/import/resample_tables.h"

namespace kiln::decomp {

/// Nearest upsampling of x [N, C, spatial...] to `out` sizes (scales: the given
/// factors, out / in): one index gather per resized dim (resample_tables.h).
template <class Cx>
Value* upsampleNearest(Cx& cx, Value* x, const std::vector<int64_t>& out,
                       const std::vector<std::optional<double>>& scales) {
  const Shape in = x->shape();
  for (size_t k = 0; k < out.size(); ++k) {
    const int64_t dim = static_cast<int64_t>(2 + k);
    if (in[dim] == out[k]) continue;
    x = cx.emit("index", {x, indexConst(cx, nearestIndex(in[dim], out[k], scales[k]))}, {{"dim", dim}});
  }
  return x;
}

/// (Bi)linear upsampling of floating x [N, C, spatial...] to `out` sizes: per
/// dim, in[i0] * w0 + in[i1] * w1 with the taps of resample_tables.h.
template <class Cx>
Value* upsampleLinear(Cx& cx, Value* x, const std::vector<int64_t>& out,
                      const std::vector<std::optional<double>>& scales, bool align_corners) {
  const Shape in = x->shape();
  const int64_t rank = static_cast<int64_t>(in.size());
  for (size_t k = 0; k < out.size(); ++k) {
    const int64_t dim = static_cast<int64_t>(2 + k);
    const LinearTaps t = linearTaps(in[dim], out[k], align_corners, scales[k]);
    Value* g0 = cx.emit("index", {x, indexConst(cx, t.i0)}, {{"dim", dim}});
    Value* g1 = cx.emit("index", {x, indexConst(cx, t.i1)}, {{"dim", dim}});
    x = cx.emit("add", {cx.emit("mul", {g0, weightConst(cx, t.w0, dim, rank, x->dtype())}),
                        cx.emit("mul", {g1, weightConst(cx, t.w1, dim, rank, x->dtype())})});
  }
  return x;
}

/// Bicubic upsampling of floating x [N, C, H, W] to `out` sizes: per dim
/// (the width first, as PyTorch's kernel), four weighted gathers.
template <class Cx>
Value* upsampleCubic(Cx& cx, Value* x, const std::vector<int64_t>& out,
                     const std::vector<std::optional<double>>& scales, bool align_corners) {
  const Shape in = x->shape();
  const int64_t rank = static_cast<int64_t>(in.size());
  for (size_t k = out.size(); k-- > 0;) {
    const int64_t dim = static_cast<int64_t>(2 + k);
    const CubicTaps t = cubicTaps(in[dim], out[k], align_corners, scales[k]);
    Value* sum = nullptr;
    for (int tap = 0; tap < 4; ++tap) {
      Value* g = cx.emit("index", {x, indexConst(cx, t.idx[tap])}, {{"dim", dim}});
      Value* term = cx.emit("mul", {g, weightConst(cx, t.w[tap], dim, rank, x->dtype())});
      sum = sum ? cx.emit("add", {sum, term}) : term;
    }
    x = sum;
  }
  return x;
}

/// pixel_shuffle(x, r): [*, C r r, H, W] -> [*, C, H r, W r]; `shuffle` false: pixel_unshuffle, the inverse.
template <class Cx>
Value* pixelShuffle(Cx& cx, Value* x, int64_t r, bool shuffle) {
  const Shape in = x->shape();
  if (in.size() < 3 || r <= 0) fail("pixel_shuffle expects a tensor with at least 3 dims and a positive factor");
  Shape lead(in.begin(), in.end() - 3);
  const auto b = static_cast<int64_t>(lead.size());
  const int64_t c = in[b], h = in[b + 1], w = in[b + 2];
  auto with = [&](std::initializer_list<int64_t> tail) {
    Shape s = lead;
    s.insert(s.end(), tail);
    return s;
  };
  std::vector<int64_t> dims;
  for (int64_t k = 0; k < b; ++k) dims.push_back(k);
  Shape split, out;
  if (shuffle) {
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
  return cx.emit("reshape", {y}, {{"shape", out}});
}

}  // namespace kiln::decomp
