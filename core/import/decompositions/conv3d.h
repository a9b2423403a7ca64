// 3-D convolution and pooling (video, volumetric models) through Kiln's 2-D
// ops, shared by both importers (see common.h for the Cx contract).
//
// Pooling factors: the window of a 3-D pool is a box, so pooling over (H, W)
// on x viewed as [N, C*D, H, W] and then over (D, Ho*Wo) on the result
// viewed as [N, C, D, Ho*Wo] (window (kd, 1)) visits exactly the 3-D
// window; both views are reshapes, no data moves. Max pools take the max of
// maxes; average pools sum twice (divisor_override 1) and divide by
// PyTorch's divisor, a product of one factor per dim; adaptive pools have
// the same bins per dim, so two adaptive 2-D pools give them.
//
// Convolution: a 3-D kernel couples the dims, so each depth tap t is one 2-D
// convolution of the input slices it reads (depth folded into the batch,
// [N*Do, C, H, W]) with the weight's slice w[:, :, t], summed over taps;
// transposed convolutions place each tap's 2-D result at depth d*sd + t*dd
// (zeros interleaved for the stride) and crop the padding. All are ordinary
// ops, so autodiff, fusion and the memory plan see them.
#pragma once

#include <string>
#include <vector>

#include "core/import/decompositions/nn.h"

namespace kiln::decomp {

/// x [N, C, D, H, W] (or unbatched [C, D, H, W]) as a batched 5-D value;
/// `unbatched` tells the caller to drop N again.
template <class Cx>
Value* batched5d(Cx& cx, Value* x, bool& unbatched, const char* what) {
  const int64_t r = x->type().rank();
  if (r != 4 && r != 5) fail(std::string(what) + " expects a 4-D or 5-D input, got " + x->type().str());
  unbatched = r == 4;
  if (!unbatched) return x;
  Shape s = x->shape();
  s.insert(s.begin(), 1);
  return reshapedTo(cx, x, s);
}

template <class Cx>
Value* unbatched5d(Cx& cx, Value* y, bool unbatched) {
  if (!unbatched) return y;
  Shape s = y->shape();
  s.erase(s.begin());
  return reshapedTo(cx, y, s);
}

/// A per-dim list of 3 (one value repeats; empty gives `empty`).
inline std::vector<int64_t> triple(std::vector<int64_t> v, const std::vector<int64_t>& empty, const char* what) {
  if (v.empty()) return empty;
  if (v.size() == 1) v.assign(3, v[0]);
  if (v.size() != 3) fail(std::string(what) + " needs 1 or 3 values, got " + std::to_string(v.size()));
  return v;
}

/// max_pool3d / avg_pool3d of x [N, C, D, H, W]; `max` picks the kind.
/// stride empty: the kernel size. avg: ceil_mode, count_include_pad and
/// divisor_override as PyTorch's avg_pool3d.
template <class Cx>
Value* pool3d(Cx& cx, Value* x, bool max, std::vector<int64_t> kernel, std::vector<int64_t> stride,
              std::vector<int64_t> padding, std::vector<int64_t> dilation, bool ceil_mode, bool count_include_pad = true,
              int64_t divisor_override = 0) {
  bool unbatched = false;
  x = batched5d(cx, x, unbatched, max ? "max_pool3d" : "avg_pool3d");
  kernel = triple(kernel, {}, "kernel_size");
  stride = triple(stride, kernel, "stride");
  padding = triple(padding, {0, 0, 0}, "padding");
  dilation = triple(dilation, {1, 1, 1}, "dilation");
  const Shape& s = x->shape();
  const int64_t n = s[0], c = s[1], d = s[2], h = s[3], w = s[4];
  const std::vector<int64_t> ones{1, 1};
  // Over (H, W) on [N, C*D, H, W].
  Value* hw = reshapedTo(cx, x, {n, c * d, h, w});
  AttrMap first{{"kernel_size", std::vector<int64_t>{kernel[1], kernel[2]}},
                {"stride", std::vector<int64_t>{stride[1], stride[2]}},
                {"padding", std::vector<int64_t>{padding[1], padding[2]}},
                {"ceil_mode", int64_t{ceil_mode}}};
  if (max) {
    first["dilation"] = std::vector<int64_t>{dilation[1], dilation[2]};
  } else {
    first["count_include_pad"] = int64_t{1};
    first["divisor_override"] = int64_t{1};  // window sums
  }
  Value* y = cx.emit(max ? "max_pool2d" : "avg_pool2d", {hw}, first);
  const int64_t ho = y->shape()[2], wo = y->shape()[3];
  // Over (D, Ho*Wo) on [N, C, D, Ho*Wo], window (kd, 1).
  AttrMap second{{"kernel_size", std::vector<int64_t>{kernel[0], 1}},
                 {"stride", std::vector<int64_t>{stride[0], 1}},
                 {"padding", std::vector<int64_t>{padding[0], 0}},
                 {"ceil_mode", int64_t{ceil_mode}}};
  if (max) {
    second["dilation"] = std::vector<int64_t>{dilation[0], 1};
  } else {
    second["count_include_pad"] = int64_t{1};
    second["divisor_override"] = int64_t{1};
  }
  y = cx.emit(max ? "max_pool2d" : "avg_pool2d", {reshapedTo(cx, y, {n, c, d, ho * wo})}, second);
  const int64_t dout = y->shape()[2];
  y = reshapedTo(cx, y, {n, c, dout, ho, wo});
  if (!max) {
    // PyTorch's avg_pool3d divisor: the window clipped to the padded input
    // (count_include_pad) or to the input, one factor per dim.
    auto factors = [&](int64_t in, int64_t out, int64_t k, int64_t st, int64_t p) {
      std::vector<double> f;
      for (int64_t o = 0; o < out; ++o) {
        int64_t start = o * st - p, end = std::min(start + k, in + p);
        const int64_t padded = end - start;
        start = std::max<int64_t>(start, 0);
        end = std::min(end, in);
        f.push_back(static_cast<double>(count_include_pad ? padded : end - start));
      }
      return f;
    };
    Tensor div(x->dtype(), {dout, ho, wo});
    const auto fd = factors(d, dout, kernel[0], stride[0], padding[0]);
    const auto fh = factors(h, ho, kernel[1], stride[1], padding[1]);
    const auto fw = factors(w, wo, kernel[2], stride[2], padding[2]);
    for (int64_t i = 0; i < dout; ++i)
      for (int64_t j = 0; j < ho; ++j)
        for (int64_t k = 0; k < wo; ++k)
          div.set((i * ho + j) * wo + k,
                  divisor_override > 0 ? static_cast<double>(divisor_override) : fd[i] * fh[j] * fw[k]);
    y = cx.emit("div", {y, cx.constInput(div)});
  }
  return unbatched5d(cx, y, unbatched);
}

/// adaptive_avg_pool3d / adaptive_max_pool3d of x [N, C, D, H, W] to `out`
/// (od, oh, ow): adaptive 2-D pools over (H, W), then over (D, oh*ow).
template <class Cx>
Value* adaptivePool3d(Cx& cx, Value* x, bool max, std::vector<int64_t> out) {
  bool unbatched = false;
  x = batched5d(cx, x, unbatched, max ? "adaptive_max_pool3d" : "adaptive_avg_pool3d");
  out = triple(out, {}, "output_size");
  const Shape& s = x->shape();
  for (int k = 0; k < 3; ++k)
    if (out[k] <= 0) out[k] = s[2 + k];  // None keeps the input size
  const char* op = max ? "adaptive_max_pool2d" : "adaptive_avg_pool2d";
  Value* y = cx.emit(op, {reshapedTo(cx, x, {s[0], s[1] * s[2], s[3], s[4]})},
                     {{"output_size", std::vector<int64_t>{out[1], out[2]}}});
  y = cx.emit(op, {reshapedTo(cx, y, {s[0], s[1], s[2], out[1] * out[2]})},
              {{"output_size", std::vector<int64_t>{out[0], out[1] * out[2]}}});
  return unbatched5d(cx, reshapedTo(cx, y, {s[0], s[1], out[0], out[1], out[2]}), unbatched);
}

/// [N, C, Do, H, W] -> [N*Do, C, H, W] (depth into the batch) and back.
template <class Cx>
Value* foldDepth(Cx& cx, Value* v) {
  const Shape& s = v->shape();
  Value* p = cx.emit("permute", {v}, {{"dims", std::vector<int64_t>{0, 2, 1, 3, 4}}});
  return reshapedTo(cx, p, {s[0] * s[2], s[1], s[3], s[4]});
}
template <class Cx>
Value* unfoldDepth(Cx& cx, Value* v, int64_t n, int64_t d) {
  const Shape& s = v->shape();
  Value* r = reshapedTo(cx, v, {n, d, s[1], s[2], s[3]});
  return cx.emit("permute", {r}, {{"dims", std::vector<int64_t>{0, 2, 1, 3, 4}}});
}

/// conv3d and conv_transpose3d of x [N, C, D, H, W] (or unbatched) with w
/// [O, C/groups, kd, kh, kw] (transposed: [C, O/groups, kd, kh, kw]) and an
/// optional bias [O]; `c` holds 3 values per list.
template <class Cx>
Value* convolution3d(Cx& cx, Value* x, Value* w, Value* b, ConvSpec c) {
  bool unbatched = false;
  x = batched5d(cx, x, unbatched, c.transposed ? "conv_transpose3d" : "conv3d");
  if (w->type().rank() != 5) fail("conv3d expects a 5-D weight, got " + w->type().str());
  c.stride = triple(c.stride, {1, 1, 1}, "stride");
  c.padding = triple(c.padding, {0, 0, 0}, "padding");
  c.dilation = triple(c.dilation, {1, 1, 1}, "dilation");
  if (c.transposed) c.output_padding = triple(c.output_padding, {0, 0, 0}, "output_padding");
  const Shape& s = x->shape();
  const int64_t n = s[0], d = s[2], kd = w->shape()[2];
  const int64_t sd = c.stride[0], pd = c.padding[0], dd = c.dilation[0];
  ConvSpec c2{{c.stride[1], c.stride[2]}, {c.padding[1], c.padding[2]}, {c.dilation[1], c.dilation[2]}, {},
              c.groups, c.transposed};
  if (c.transposed) c2.output_padding = {c.output_padding[1], c.output_padding[2]};
  auto tapWeight = [&](int64_t t) {
    return cx.emit("select", {w}, {{"dim", int64_t{2}}, {"index", t}});
  };
  Value* y = nullptr;
  if (!c.transposed) {
    const int64_t dout = (d + 2 * pd - dd * (kd - 1) - 1) / sd + 1;
    if (dout <= 0) fail("conv3d: the input depth " + std::to_string(d) + " is smaller than the kernel");
    Value* xp = pd > 0 ? cx.emit("pad", {x}, {{"pads", std::vector<int64_t>{0, 0, 0, 0, pd, pd}},
                                              {"mode", std::string("constant")}, {"value", 0.0}})
                       : x;
    for (int64_t t = 0; t < kd; ++t) {
      const int64_t start = t * dd;
      Value* slices = cx.emit("slice", {xp}, {{"dim", int64_t{2}}, {"start", start},
                                              {"end", start + (dout - 1) * sd + 1}, {"step", sd}});
      Value* yt = convolution(cx, foldDepth(cx, slices), tapWeight(t), t == 0 ? b : nullptr, c2);
      y = y ? cx.emit("add", {y, yt}) : yt;
    }
    y = unfoldDepth(cx, y, n, dout);
  } else {
    // Output depth index z = i * sd - pd + t * dd for input depth i and tap t.
    const int64_t full = (d - 1) * sd + dd * (kd - 1) + 1 + c.output_padding[0];
    const int64_t dout = full - 2 * pd;
    if (c.output_padding[0] >= std::max(sd, dd))
      fail("conv_transpose3d: output_padding must be smaller than stride or dilation");
    if (dout <= 0) fail("conv_transpose3d: a non-positive output depth");
    Value* xf = foldDepth(cx, x);
    for (int64_t t = 0; t < kd; ++t) {
      Value* u = convolution(cx, xf, tapWeight(t), nullptr, c2);  // [N*D, O, Ho, Wo]
      const Shape& us = u->shape();
      Value* v = reshapedTo(cx, u, {n, d, 1, us[1], us[2], us[3]});
      if (sd > 1) {  // zeros between the input depths: [N, D, sd, ...] -> [N, D*sd, ...], cut to (D-1)*sd+1
        Value* gap = cx.emit("full", {}, {{"shape", Shape{n, d, sd - 1, us[1], us[2], us[3]}}, {"value", 0.0},
                                          {"dtype", u->dtype()}});
        v = cx.emit("cat", {v, gap}, {{"dim", int64_t{2}}});
      }
      v = reshapedTo(cx, v, {n, d * sd, us[1], us[2], us[3]});
      const int64_t span = (d - 1) * sd + 1;
      if (sd > 1) v = cx.emit("slice", {v}, {{"dim", int64_t{1}}, {"start", int64_t{0}}, {"end", span}, {"step", int64_t{1}}});
      const int64_t before = t * dd, after = full - before - span;
      v = cx.emit("pad", {v}, {{"pads", std::vector<int64_t>{0, 0, 0, 0, 0, 0, before, after}},
                               {"mode", std::string("constant")}, {"value", 0.0}});
      y = y ? cx.emit("add", {y, v}) : v;
    }
    if (pd > 0 || dout != full)
      y = cx.emit("slice", {y}, {{"dim", int64_t{1}}, {"start", pd}, {"end", pd + dout}, {"step", int64_t{1}}});
    y = cx.emit("permute", {y}, {{"dims", std::vector<int64_t>{0, 2, 1, 3, 4}}});
    if (b) y = cx.emit("add", {y, reshapedTo(cx, b, {b->shape()[0], 1, 1, 1})});
  }
  return unbatched5d(cx, y, unbatched);
}

}  // namespace kiln::decomp
