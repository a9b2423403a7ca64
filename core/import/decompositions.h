// Decompositions of aten operators into Kiln ops that both importers share
// (TorchScript: core/import/torchscript, FX: core/import/fx), so a model
// imports to the same graph whichever way it was exported. Each function
// takes a lowering context Cx with
//   Value* emit(std::string_view op, std::vector<Value*> inputs, AttrMap attrs = {});
//   Node* emitNode(std::string_view op, std::vector<Value*> inputs, AttrMap attrs = {});
//   Value* scalar(double value, DType dtype);   // a 0-d constant
//   Value* constInput(const Tensor& t);          // a tensor known at import time
// and returns the value that replaces the aten op's result. Arguments are
// already decoded (the importers read them positionally or by name); shape
// errors go through kiln::fail, which the importers report with the node.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/import/resample_tables.h"
#include "core/ir.h"
#include "core/ops/op_helpers.h"
#include "core/result.h"
#include "core/tensor.h"

namespace kiln::decomp {

/// 'text' for messages.
inline std::string quoteText(const std::string& s) { return "'" + s + "'"; }

/// trunc(q) = sign(q) * floor(|q|).
template <class Cx>
Value* truncate(Cx& cx, Value* q) {
  return cx.emit("mul", {cx.emit("sign", {q}), cx.emit("floor", {cx.emit("abs", {q})})});
}

/// div(x, y, rounding_mode="trunc") for x, y of one dtype: floats truncate
/// the quotient, integers divide the magnitudes and take the sign.
template <class Cx>
Value* truncDiv(Cx& cx, Value* x, Value* y) {
  if (isFloating(x->dtype())) return truncate(cx, cx.emit("div", {x, y}));
  Value* q = cx.emit("floor_div", {cx.emit("abs", {x}), cx.emit("abs", {y})});
  return cx.emit("mul", {q, cx.emit("mul", {cx.emit("sign", {x}), cx.emit("sign", {y})})});
}

/// elu(x, alpha, scale, input_scale): x > 0 ? scale x : scale alpha (exp(input_scale x) - 1).
/// SELU (scale, alpha fixed) and CELU (input_scale = 1 / alpha) are this op.
template <class Cx>
Value* elu(Cx& cx, Value* x, double alpha, double scale, double input_scale) {
  const DType t = x->dtype();
  if (input_scale == 1.0) {
    Value* e = cx.emit("elu", {x}, {{"alpha", alpha}});
    return scale == 1.0 ? e : cx.emit("mul", {e, cx.scalar(scale, t)});
  }
  Value* pos = scale == 1.0 ? x : cx.emit("mul", {x, cx.scalar(scale, t)});
  Value* em1 = cx.emit("sub", {cx.emit("exp", {cx.emit("mul", {x, cx.scalar(input_scale, t)})}), cx.scalar(1.0, t)});
  Value* neg = cx.emit("mul", {em1, cx.scalar(alpha * scale, t)});
  return cx.emit("where", {cx.emit("gt", {x, cx.scalar(0.0, t)}), pos, neg});
}

/// prelu(x, w): one slope per channel (dim 1) or a single one.
template <class Cx>
Value* prelu(Cx& cx, Value* x, Value* w) {
  if (x->type().rank() >= 2 && w->type().numel() > 1) {
    Shape s(static_cast<size_t>(x->type().rank() - 1), 1);
    s[0] = w->type().numel();
    w = cx.emit("reshape", {w}, {{"shape", s}});
  }
  Value* pos = cx.emit("gt", {x, cx.scalar(0, x->dtype())});
  return cx.emit("where", {pos, x, cx.emit("mul", {w, x})});
}

/// hardshrink: |x| > l ? x : 0; softshrink: x - l above l, x + l below -l, else 0.
template <class Cx>
Value* shrink(Cx& cx, Value* x, double l, bool hard) {
  const DType t = x->dtype();
  Value* zero = cx.scalar(0, t);
  if (hard) return cx.emit("where", {cx.emit("gt", {cx.emit("abs", {x}), cx.scalar(l, t)}), x, zero});
  Value* above = cx.emit("where", {cx.emit("gt", {x, cx.scalar(l, t)}), cx.emit("sub", {x, cx.scalar(l, t)}), zero});
  return cx.emit("where", {cx.emit("lt", {x, cx.scalar(-l, t)}), cx.emit("add", {x, cx.scalar(l, t)}), above});
}

/// glu(x, dim) = a * sigmoid(b) for the two halves a, b of x along dim (normalized).
template <class Cx>
Value* glu(Cx& cx, Value* x, int64_t dim) {
  const int64_t n = x->shape()[dim];
  if (n % 2) fail("glu() needs an even size along dim " + std::to_string(dim) + ", got " + std::to_string(n));
  Node* halves = cx.emitNode("split", {x}, {{"dim", dim}, {"sizes", std::vector<int64_t>{n / 2, n / 2}}});
  return cx.emit("mul", {halves->output(0), cx.emit("sigmoid", {halves->output(1)})});
}

/// `v` reduced as a loss: "none", "mean" or "sum" over every element.
template <class Cx>
Value* reduceLoss(Cx& cx, Value* v, const std::string& reduction) {
  if (reduction == "none") return v;
  return cx.emit(reduction, {v}, {{"dims", std::vector<int64_t>{}}, {"keepdim", int64_t{0}}});
}

/// The elementwise l1 ("l1"), smooth_l1 (k = beta) or huber (k = delta) loss of x, y (one dtype).
template <class Cx>
Value* robustLoss(Cx& cx, Value* x, Value* y, const std::string& kind, double k) {
  const DType t = x->dtype();
  Value* d = cx.emit("abs", {cx.emit("sub", {x, y})});
  if (kind == "l1" || (kind == "smooth_l1" && k == 0)) return d;
  Value* half_sq = cx.emit("mul", {cx.emit("mul", {d, d}), cx.scalar(0.5, t)});
  Value* small = cx.emit("lt", {d, cx.scalar(k, t)});
  Value* linear = cx.emit("sub", {d, cx.scalar(0.5 * k, t)});
  if (kind == "smooth_l1") return cx.emit("where", {small, cx.emit("div", {half_sq, cx.scalar(k, t)}), linear});
  return cx.emit("where", {small, half_sq, cx.emit("mul", {linear, cx.scalar(k, t)})});
}

/// Class-weighted negative log-likelihood of log-probabilities logp ([N, C,
/// d...] or unbatched [C, ...]; classes on dim 1, or 0 when target has one
/// dim less than logp's batch form) at integer targets, PyTorch's nll_loss
/// with `weight` [C]: each element's loss -w[t] logp[t], ignore_index
/// elements weigh 0, "mean" divides by the summed weights of the rest.
/// `total_weight` (optional out) gets that sum.
template <class Cx>
Value* weightedNll(Cx& cx, Value* logp, Value* target, Value* weight, const std::string& reduction,
                   int64_t ignore_index, Value** total_weight = nullptr) {
  const DType t = logp->dtype();
  const int64_t cd = target->type().rank() == logp->type().rank() - 1 && logp->type().rank() >= 2 ? 1 : 0;
  Value* ignored = cx.emit("eq", {target, cx.scalar(static_cast<double>(ignore_index), target->dtype())});
  Value* safe = cx.emit("where", {ignored, cx.scalar(0, target->dtype()), target});
  Shape picked_shape = target->shape();
  picked_shape.insert(picked_shape.begin() + cd, 1);
  Value* picked = cx.emit("gather", {logp, cx.emit("reshape", {safe}, {{"shape", picked_shape}})}, {{"dim", cd}});
  picked = cx.emit("reshape", {picked}, {{"shape", target->shape()}});
  Value* flat = cx.emit("reshape", {safe}, {{"shape", Shape{target->type().numel()}}});
  Value* wt = cx.emit("index", {cx.cast(weight, t), flat}, {{"dim", int64_t{0}}});
  wt = cx.emit("reshape", {wt}, {{"shape", target->shape()}});
  wt = cx.emit("where", {ignored, cx.scalar(0, t), wt});
  Value* loss = cx.emit("neg", {cx.emit("mul", {picked, wt})});
  auto all = [&](const char* op, Value* v) {
    return cx.emit(op, {v}, {{"dims", std::vector<int64_t>{}}, {"keepdim", int64_t{0}}});
  };
  if (total_weight) *total_weight = all("sum", wt);
  if (reduction == "none") return loss;
  if (reduction == "sum") return all("sum", loss);
  return cx.emit("div", {all("sum", loss), total_weight ? *total_weight : all("sum", wt)});
}

/// Class-weighted cross-entropy of logits x with label smoothing eps:
/// (1 - eps) nll + eps / C * smooth, smooth = -sum_c w_c logp_c per element
/// (0 where ignored; "mean" divides by the target weights' sum), as
/// PyTorch's cross_entropy_loss_label_smoothing does with a weight.
template <class Cx>
Value* weightedCrossEntropy(Cx& cx, Value* x, Value* target, Value* weight, const std::string& reduction,
                            int64_t ignore_index, double eps) {
  const int64_t cd = target->type().rank() == x->type().rank() - 1 && x->type().rank() >= 2 ? 1 : 0;
  Value* logp = cx.emit("log_softmax", {x}, {{"dim", cd}});
  Value* total = nullptr;
  Value* nll = weightedNll(cx, logp, target, weight, reduction, ignore_index, &total);
  if (eps == 0) return nll;
  const DType t = x->dtype();
  Shape ws(static_cast<size_t>(x->type().rank()), 1);
  ws[cd] = x->shape()[cd];
  Value* w = cx.emit("reshape", {cx.cast(weight, t)}, {{"shape", ws}});
  Value* smooth = cx.emit("neg", {cx.emit("sum", {cx.emit("mul", {logp, w})},
                                          {{"dims", std::vector<int64_t>{cd}}, {"keepdim", int64_t{0}}})});
  Value* ignored = cx.emit("eq", {target, cx.scalar(static_cast<double>(ignore_index), target->dtype())});
  smooth = cx.emit("where", {ignored, cx.scalar(0, t), smooth});
  if (reduction != "none") {
    smooth = cx.emit("sum", {smooth}, {{"dims", std::vector<int64_t>{}}, {"keepdim", int64_t{0}}});
    if (reduction == "mean") smooth = cx.emit("div", {smooth, total});
  }
  const double classes = static_cast<double>(x->shape()[cd]);
  return cx.emit("add", {cx.emit("mul", {nll, cx.scalar(1 - eps, t)}), cx.emit("mul", {smooth, cx.scalar(eps / classes, t)})});
}

/// xlogy(x, y) = x log(y), 0 where x == 0 unless y is NaN (x, y of one floating dtype).
template <class Cx>
Value* xlogy(Cx& cx, Value* x, Value* y) {
  Value* zero_x = cx.emit("logical_and", {cx.emit("eq", {x, cx.scalar(0, x->dtype())}), cx.emit("eq", {y, y})});
  return cx.emit("where", {zero_x, cx.scalar(0, x->dtype()), cx.emit("mul", {x, cx.emit("log", {y})})});
}

/// Elementwise KL divergence of log-probabilities x from target t (one
/// dtype): t (log t - x) where t > 0, else 0; with log_target, exp(t) (t - x).
template <class Cx>
Value* klDiv(Cx& cx, Value* x, Value* t, bool log_target) {
  if (log_target) return cx.emit("mul", {cx.emit("exp", {t}), cx.emit("sub", {t, x})});
  Value* pos = cx.emit("mul", {t, cx.emit("sub", {cx.emit("log", {t}), x})});
  return cx.emit("where", {cx.emit("gt", {t, cx.scalar(0, t->dtype())}), pos, cx.scalar(0, t->dtype())});
}

/// log(v) clamped at -100, as PyTorch's binary_cross_entropy does.
template <class Cx>
Value* clampedLog(Cx& cx, Value* v) {
  return cx.emit("clamp", {cx.emit("log", {v})}, {{"min", -100.0}});
}

/// Elementwise binary cross-entropy of probabilities x and targets y (one
/// dtype), times the weight w when given.
template <class Cx>
Value* bce(Cx& cx, Value* x, Value* y, Value* w) {
  Value* one = cx.scalar(1.0, x->dtype());
  Value* pos = cx.emit("mul", {y, clampedLog(cx, x)});
  Value* neg = cx.emit("mul", {cx.emit("sub", {one, y}), clampedLog(cx, cx.emit("sub", {one, x}))});
  Value* loss = cx.emit("neg", {cx.emit("add", {pos, neg})});
  return w ? cx.emit("mul", {loss, w}) : loss;
}

/// Elementwise binary cross-entropy with logits x, in the stable form
/// (1 - y) x + w_pos (log1p(exp(-|x|)) + max(-x, 0)), w_pos = (pos_weight - 1) y + 1;
/// times the weight w when given.
template <class Cx>
Value* bceWithLogits(Cx& cx, Value* x, Value* y, Value* w, Value* pos_weight) {
  Value* one = cx.scalar(1.0, x->dtype());
  Value* softplus_neg = cx.emit("add", {cx.emit("log1p", {cx.emit("exp", {cx.emit("neg", {cx.emit("abs", {x})})})}),
                                        cx.emit("clamp", {cx.emit("neg", {x})}, {{"min", 0.0}})});
  if (pos_weight) {
    Value* wp = cx.emit("add", {cx.emit("mul", {cx.emit("sub", {pos_weight, one}), y}), one});
    softplus_neg = cx.emit("mul", {wp, softplus_neg});
  }
  Value* loss = cx.emit("add", {cx.emit("mul", {cx.emit("sub", {one, y}), x}), softplus_neg});
  return w ? cx.emit("mul", {loss, w}) : loss;
}

/// logsumexp over `dims` (normalized; empty = all) = m + log(sum(exp(x - m))),
/// m = amax(x); rows whose max is infinite use m = 0, as PyTorch does.
template <class Cx>
Value* logsumexp(Cx& cx, Value* x, const std::vector<int64_t>& dims, bool keep) {
  const DType t = x->dtype();
  auto reduce = [&](const char* op, Value* v, bool k) {
    return cx.emit(op, {v}, {{"dims", dims}, {"keepdim", int64_t{k}}});
  };
  Value* m = reduce("amax", x, true);
  Value* finite =
      cx.emit("where", {cx.emit("eq", {cx.emit("abs", {m}), cx.scalar(INFINITY, t)}), cx.scalar(0, t), m});
  Value* s = reduce("sum", cx.emit("exp", {cx.emit("sub", {x, finite})}), keep);
  Value* mk = keep ? finite : reduce("amax", finite, false);
  return cx.emit("add", {cx.emit("log", {s}), mk});
}

/// The p-norm of floating x over `dims` (normalized; empty = all) for p = 1, 2, inf.
template <class Cx>
Value* pnorm(Cx& cx, Value* x, double p, const std::vector<int64_t>& dims, bool keep) {
  auto reduce = [&](const char* op, Value* v) {
    return cx.emit(op, {v}, {{"dims", dims}, {"keepdim", int64_t{keep}}});
  };
  if (p == 2) return cx.emit("sqrt", {reduce("sum", cx.emit("mul", {x, x}))});
  if (p == 1) return reduce("sum", cx.emit("abs", {x}));
  if (std::isinf(p) && p > 0) return reduce("amax", cx.emit("abs", {x}));
  fail("only p = 1, 2 and inf norms are supported, got p = " + std::to_string(p));
}

/// An int64 index vector as a constant input.
template <class Cx>
Value* indexConst(Cx& cx, const std::vector<int64_t>& idx) {
  return cx.constInput(Tensor::fromInt64s({static_cast<int64_t>(idx.size())}, idx));
}

/// Weights of shape [1, .., w.size(), .., 1] along `dim` of a rank-`rank` tensor, as a constant input.
template <class Cx>
Value* weightConst(Cx& cx, const std::vector<double>& w, int64_t dim, int64_t rank, DType t) {
  Shape s(static_cast<size_t>(rank), 1);
  s[dim] = static_cast<int64_t>(w.size());
  Tensor tw(t, s);
  for (size_t k = 0; k < w.size(); ++k) tw.set(static_cast<int64_t>(k), w[k]);
  return cx.constInput(tw);
}

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

/// `x` reshaped to `s` unless it has that shape already.
template <class Cx>
Value* reshapedTo(Cx& cx, Value* x, const Shape& s) {
  return x->shape() == s ? x : cx.emit("reshape", {x}, {{"shape", s}});
}

/// A convolution's attributes, each list one entry per spatial dim (1 or 2).
struct ConvSpec {
  std::vector<int64_t> stride, padding, dilation, output_padding;  ///< output_padding: transposed only
  int64_t groups = 1;
  bool transposed = false;
};

/// conv1d/conv2d and conv_transpose1d/2d of x ([N,] C, [H,] W) and w (rank
/// spatial + 2), with an optional bias b [C_out]. A transposed convolution is
/// conv2d's input gradient: x plays the output gradient and w
/// [C_in, C_out/groups, kh, kw] conv2d's weight (op_helpers'
/// transposedConvOutput gives its shape). 1-D runs through an inserted H = 1
/// dim (stride/padding/dilation 1/0/1 there), unbatched input through N = 1.
template <class Cx>
Value* convolution(Cx& cx, Value* x, Value* w, Value* b, ConvSpec c) {
  const int64_t spatial = w->type().rank() - 2;
  if (spatial != 1 && spatial != 2)
    fail(std::to_string(spatial) + "-d convolution is not supported (Kiln has conv2d; conv1d maps onto it)");
  const bool batched = x->type().rank() == spatial + 2;
  if (!batched && x->type().rank() != spatial + 1)
    fail(x->type().str() + " does not match a " + std::to_string(spatial) + "-d convolution");
  Shape in = x->shape();
  if (!batched) in.insert(in.begin(), 1);
  if (spatial == 1) {
    in.insert(in.end() - 1, 1);
    Shape ws = w->shape();
    ws.insert(ws.end() - 1, 1);
    w = reshapedTo(cx, w, ws);
    c.stride.insert(c.stride.begin(), 1);
    c.padding.insert(c.padding.begin(), 0);
    c.dilation.insert(c.dilation.begin(), 1);
    if (c.transposed) c.output_padding.insert(c.output_padding.begin(), 0);
  }
  x = reshapedTo(cx, x, in);
  AttrMap attrs = {{"stride", c.stride}, {"padding", c.padding}, {"dilation", c.dilation}, {"groups", c.groups}};
  Value* y = nullptr;
  if (c.transposed) {
    attrs["input_shape"] =
        transposedConvOutput(in, w->shape(), c.stride, c.padding, c.dilation, c.output_padding, c.groups);
    y = cx.emit("conv2d_input_backward", {x, w}, std::move(attrs));
    if (b) y = cx.emit("add", {y, reshapedTo(cx, b, {b->shape()[0], 1, 1})});
  } else {
    std::vector<Value*> inputs = {x, w};
    if (b) inputs.push_back(b);
    y = cx.emit("conv2d", inputs, std::move(attrs));
  }
  Shape out = y->shape();
  if (spatial == 1) out.erase(out.end() - 2);
  if (!batched) out.erase(out.begin());
  return reshapedTo(cx, y, out);
}

/// The (values, indices) pair of topk, sort and kthvalue.
struct ValuesIndices {
  Value* values;
  Value* indices;
};

/// The k best along dim (largest or smallest, best first; a 0-d x reads as
/// [1]): Kiln's topk gives the indices and a gather the values, so the
/// values' gradient is gather's (a scatter_add into x's shape) and the
/// indices have none.
template <class Cx>
ValuesIndices topk(Cx& cx, Value* x, int64_t k, int64_t dim, bool largest) {
  if (x->type().rank() == 0) x = reshapedTo(cx, x, {1});
  const int64_t d = normalizeAxis(dim, x->type().rank());
  Value* idx = cx.emit("topk", {x}, {{"k", k}, {"dim", d}, {"largest", int64_t{largest}}});
  return {cx.emit("gather", {x, idx}, {{"dim", d}}), idx};
}

/// kthvalue(x, k, dim, keepdim): the k-th smallest (1-based) along dim.
template <class Cx>
ValuesIndices kthvalue(Cx& cx, Value* x, int64_t k, int64_t dim, bool keepdim) {
  if (x->type().rank() == 0) x = reshapedTo(cx, x, {1});
  const int64_t d = normalizeAxis(dim, x->type().rank());
  if (k < 1 || k > x->shape()[d]) fail("kthvalue: k=" + std::to_string(k) + " is out of range for " + x->type().str());
  Value* idx = cx.emit("topk", {x}, {{"k", k}, {"dim", d}, {"largest", int64_t{0}}});
  idx = cx.emit("slice", {idx}, {{"dim", d}, {"start", k - 1}, {"end", k}, {"step", int64_t{1}}});
  Value* values = cx.emit("gather", {x, idx}, {{"dim", d}});
  if (!keepdim) {
    Shape s = idx->shape();
    s.erase(s.begin() + d);
    idx = reshapedTo(cx, idx, s);
    values = reshapedTo(cx, values, s);
  }
  return {values, idx};
}

/// `v` broadcast to `s` unless it has that shape already.
template <class Cx>
Value* expandedTo(Cx& cx, Value* v, const Shape& s) {
  return v->shape() == s ? v : cx.emit("expand", {v}, {{"shape", s}});
}

/// Integer index `i` (i64) with negative entries counted from the end of a dim of `size`.
template <class Cx>
Value* wrapIndex(Cx& cx, Value* i, int64_t size) {
  i = cx.cast(i, DType::I64);
  Value* neg = cx.emit("lt", {i, cx.scalar(0, DType::I64)});
  return cx.emit("where", {neg, cx.emit("add", {i, cx.scalar(static_cast<double>(size), DType::I64)}), i});
}

/// Advanced indexing (x[i, j], x[:, i, :, j] = v) as one index along one
/// dim: the indexed dims of x moved to the front and flattened into one,
/// the index tensors (broadcast together) combined into one linear index.
struct AdvancedIndex {
  Value* rows = nullptr;       ///< x as [prod(indexed sizes), rest...]
  Value* linear = nullptr;     ///< the linear index, i64 [n], n = numel(index_shape)
  Shape index_shape;           ///< the index tensors' broadcast shape
  Shape rest;                  ///< the dims of x that are not indexed, in order
  std::vector<int64_t> perm;   ///< x -> [indexed..., rest...]
  int64_t at = 0;              ///< where x[indices] puts the index dims: the first indexed dim when the
                               ///< indexed dims are adjacent, else 0 (PyTorch's rule)
};

/// `indices`: one entry per leading dim of x (nullptr: that whole dim), at
/// least one an integer tensor (boolean masks are handled by the callers).
template <class Cx>
AdvancedIndex advancedIndex(Cx& cx, Value* x, const std::vector<Value*>& indices) {
  const Shape& xs = x->shape();
  const auto rank = static_cast<int64_t>(xs.size());
  if (static_cast<int64_t>(indices.size()) > rank)
    fail(std::to_string(indices.size()) + " indices for a tensor " + x->type().str());
  AdvancedIndex r;
  std::vector<int64_t> indexed;
  bool first = true;
  for (size_t k = 0; k < indices.size(); ++k) {
    if (!indices[k]) continue;
    if (!isIntegral(indices[k]->dtype()) || indices[k]->dtype() == DType::Bool)
      fail("index tensors must hold integers, got " + indices[k]->type().str());
    indexed.push_back(static_cast<int64_t>(k));
    r.index_shape = first ? indices[k]->shape() : broadcastShapes(r.index_shape, indices[k]->shape());
    first = false;
  }
  if (indexed.empty()) fail("advanced indexing needs an index tensor");
  bool adjacent = true;
  for (size_t k = 1; k < indexed.size(); ++k) adjacent = adjacent && indexed[k] == indexed[k - 1] + 1;
  r.at = adjacent ? indexed[0] : 0;
  int64_t rows = 1;
  for (int64_t d : indexed) r.perm.push_back(d), rows *= xs[d];
  for (int64_t d = 0; d < rank; ++d)
    if (std::find(indexed.begin(), indexed.end(), d) == indexed.end()) r.perm.push_back(d), r.rest.push_back(xs[d]);
  bool identity = true;
  for (int64_t d = 0; d < rank; ++d) identity = identity && r.perm[d] == d;
  Value* moved = identity ? x : cx.emit("permute", {x}, {{"dims", r.perm}});
  Shape flat{rows};
  flat.insert(flat.end(), r.rest.begin(), r.rest.end());
  r.rows = reshapedTo(cx, moved, flat);
  // linear = sum over the indexed dims of wrap(i_d) * stride_d (row-major).
  Value* linear = nullptr;
  int64_t stride = 1;
  for (size_t k = indexed.size(); k-- > 0;) {
    const int64_t d = indexed[k];
    Value* i = expandedTo(cx, wrapIndex(cx, indices[d], xs[d]), r.index_shape);
    if (stride != 1) i = cx.emit("mul", {i, cx.scalar(static_cast<double>(stride), DType::I64)});
    linear = linear ? cx.emit("add", {linear, i}) : i;
    stride *= xs[d];
  }
  r.linear = reshapedTo(cx, linear, {numelOf(r.index_shape)});
  return r;
}

/// The permutation from [index dims..., rest...] to PyTorch's layout of
/// x[indices]: rest[:at] + index dims + rest[at:] (inverse: `to_torch` false).
inline std::vector<int64_t> indexLayout(const AdvancedIndex& r, bool to_torch) {
  const auto nb = static_cast<int64_t>(r.index_shape.size()), nr = static_cast<int64_t>(r.rest.size());
  std::vector<int64_t> dims;
  if (to_torch) {
    for (int64_t d = 0; d < r.at; ++d) dims.push_back(nb + d);
    for (int64_t d = 0; d < nb; ++d) dims.push_back(d);
    for (int64_t d = r.at; d < nr; ++d) dims.push_back(nb + d);
  } else {
    for (int64_t d = 0; d < nb; ++d) dims.push_back(r.at + d);
    for (int64_t d = 0; d < r.at; ++d) dims.push_back(d);
    for (int64_t d = r.at; d < nr; ++d) dims.push_back(nb + d);
  }
  return dims;
}

/// x[indices] with integer index tensors (aten::index): the flattened rows
/// gathered at the linear index, shaped and placed as PyTorch does.
template <class Cx>
Value* indexTensors(Cx& cx, Value* x, const std::vector<Value*>& indices) {
  const AdvancedIndex r = advancedIndex(cx, x, indices);
  Shape out = r.index_shape;
  out.insert(out.end(), r.rest.begin(), r.rest.end());
  Value* g = reshapedTo(cx, cx.emit("index", {r.rows, r.linear}, {{"dim", int64_t{0}}}), out);
  return r.at == 0 ? g : cx.emit("permute", {g}, {{"dims", indexLayout(r, true)}});
}

/// x[indices] (aten::index): no index tensor is x, one is Kiln's `index`
/// along its dim, several go through advancedIndex; a boolean mask gives a
/// data-dependent shape and fails.
template <class Cx>
Value* indexWith(Cx& cx, Value* x, const std::vector<Value*>& indices) {
  int64_t dim = -1, count = 0;
  for (size_t k = 0; k < indices.size(); ++k) {
    if (!indices[k]) continue;
    if (indices[k]->dtype() == DType::Bool || indices[k]->dtype() == DType::U8)
      fail("indexing with a boolean mask has a data-dependent shape; Kiln needs static shapes (x[mask] = v and "
           "torch.where(mask, x, y) are static)");
    if (!isIntegral(indices[k]->dtype())) fail("index tensors must hold integers, got " + indices[k]->type().str());
    dim = static_cast<int64_t>(k);
    ++count;
  }
  if (static_cast<int64_t>(indices.size()) > std::max<int64_t>(x->type().rank(), 1))
    fail(std::to_string(indices.size()) + " indices for a tensor " + x->type().str());
  if (count == 0) return x;
  if (count == 1) return cx.emit("index", {x, indices[static_cast<size_t>(dim)]}, {{"dim", dim}});
  return indexTensors(cx, x, indices);
}

/// x.index_put(indices, values, accumulate). A single boolean mask over
/// x's leading dims (x[mask] = v, v one value or broadcast over the dims
/// the mask leaves) is a where; integer index tensors go through
/// advancedIndex: accumulate adds the values at the indices (duplicates add
/// up, as PyTorch's), otherwise the indexed elements take the values
/// (duplicate indices, where PyTorch leaves unspecified which value wins,
/// add up here).
template <class Cx>
Value* indexPut(Cx& cx, Value* x, const std::vector<Value*>& indices, Value* values, bool accumulate) {
  values = cx.cast(values, x->dtype());
  const Shape& xs = x->shape();
  size_t masks = 0, tensors = 0;
  for (Value* i : indices)
    if (i) ++tensors, masks += i->dtype() == DType::Bool || i->dtype() == DType::U8;
  if (masks) {
    if (tensors != 1 || !indices[0])
      fail("index_put with a boolean mask is supported as x[mask] = v with the mask alone over x's leading dims");
    Value* mask = cx.cast(indices[0], DType::Bool);
    const Shape& ms = mask->shape();
    if (ms.size() > xs.size() || !std::equal(ms.begin(), ms.end(), xs.begin()))
      fail("the mask " + mask->type().str() + " does not match the leading dims of " + x->type().str());
    Shape tail(xs.begin() + static_cast<std::ptrdiff_t>(ms.size()), xs.end());
    const Shape& vs = values->shape();
    bool fits = vs.size() <= tail.size();
    for (size_t k = 0; fits && k < vs.size(); ++k) {
      const int64_t have = vs[vs.size() - 1 - k], want = tail[tail.size() - 1 - k];
      fits = have == 1 || have == want;
    }
    if (!fits)
      fail("x[mask] = v needs v to broadcast over the dims the mask leaves (" + TensorType{x->dtype(), tail}.str() +
           "); " + values->type().str() + " depends on how many elements the mask selects");
    Shape mshape = ms;
    mshape.resize(xs.size(), 1);
    mask = expandedTo(cx, reshapedTo(cx, mask, mshape), xs);
    Value* v = expandedTo(cx, values, xs);
    if (accumulate) return cx.emit("add", {x, cx.emit("where", {mask, v, cx.scalar(0, x->dtype())})});
    return cx.emit("where", {mask, v, x});
  }
  const AdvancedIndex r = advancedIndex(cx, x, indices);
  // The values in x[indices]'s layout, then as [n, rest...].
  Shape torch_shape(r.rest.begin(), r.rest.begin() + r.at);
  torch_shape.insert(torch_shape.end(), r.index_shape.begin(), r.index_shape.end());
  torch_shape.insert(torch_shape.end(), r.rest.begin() + r.at, r.rest.end());
  Value* v = expandedTo(cx, values, torch_shape);
  if (r.at != 0) v = cx.emit("permute", {v}, {{"dims", indexLayout(r, false)}});
  Shape vrows{numelOf(r.index_shape)};
  vrows.insert(vrows.end(), r.rest.begin(), r.rest.end());
  v = reshapedTo(cx, v, vrows);
  const Shape& rs = r.rows->shape();
  Value* put = nullptr;
  if (accumulate) {
    put = cx.emit("index_add", {r.rows, r.linear, v}, {{"dim", int64_t{0}}});
  } else {
    Value* zeros = cx.emit("full", {}, {{"shape", rs}, {"value", 0.0}, {"dtype", x->dtype()}});
    Value* placed = cx.emit("index_add", {zeros, r.linear, v}, {{"dim", int64_t{0}}});
    // Which rows an index hits: counts over the rows, > 0.
    Value* none = cx.emit("full", {}, {{"shape", Shape{rs[0]}}, {"value", 0.0}, {"dtype", DType::F32}});
    Value* ones = cx.emit("full", {}, {{"shape", Shape{numelOf(r.index_shape)}}, {"value", 1.0}, {"dtype", DType::F32}});
    Value* hits = cx.emit("index_add", {none, r.linear, ones}, {{"dim", int64_t{0}}});
    Shape hs(rs.size(), 1);
    hs[0] = rs[0];
    Value* hit = reshapedTo(cx, cx.emit("gt", {hits, cx.scalar(0, DType::F32)}), hs);
    put = cx.emit("where", {hit, placed, r.rows});
  }
  // Back to x's layout.
  Shape moved;
  for (int64_t d : r.perm) moved.push_back(xs[d]);
  Value* y = reshapedTo(cx, put, moved);
  std::vector<int64_t> inverse(r.perm.size());
  for (size_t k = 0; k < r.perm.size(); ++k) inverse[static_cast<size_t>(r.perm[k])] = static_cast<int64_t>(k);
  bool identity = true;
  for (size_t k = 0; k < inverse.size(); ++k) identity = identity && inverse[k] == static_cast<int64_t>(k);
  return identity ? y : cx.emit("permute", {y}, {{"dims", inverse}});
}

/// scatter(x, dim, index, src | value [, reduce]) and scatter_add /
/// scatter_reduce(sum | mean, include_self): the contributions summed into
/// zeros at the indices (scatter_add, adjoint of gather), then combined with
/// x. Plain scatter replaces the elements an index hits (duplicate indices,
/// unspecified in PyTorch, add up here). `src` is a tensor, or null with a
/// scalar `value`. reduce: "" (replace), "sum"/"add", "mean"; "prod"/
/// "multiply", "amax", "amin" fail.
template <class Cx>
Value* scatter(Cx& cx, Value* x, int64_t dim, Value* index, Value* src, double value, const std::string& reduce,
               bool include_self = true) {
  if (!isFloating(x->dtype())) {
    // Kiln's scatter_add adds floats: integers go through f64 (exact below
    // 2^53), mean rounds down as PyTorch's integer division does.
    Value* r = scatter(cx, cx.cast(x, DType::F64), dim, index, src ? cx.cast(src, DType::F64) : nullptr, value,
                       reduce, include_self);
    if (reduce == "mean") r = cx.emit("floor", {r});
    return cx.cast(r, x->dtype());
  }
  const DType t = x->dtype();
  const int64_t d = normalizeAxis(dim, x->type().rank());
  if (!isIntegral(index->dtype()) || index->dtype() == DType::Bool)
    fail("scatter's index must hold integers, got " + index->type().str());
  const bool plain = reduce.empty(), given_src = src != nullptr;
  if (!src) src = cx.emit("full", {}, {{"shape", index->shape()}, {"value", value}, {"dtype", t}});
  src = cx.cast(src, t);
  auto sumInto = [&](Value* base, Value* what) { return cx.emit("scatter_add", {base, index, what}, {{"dim", d}}); };
  const bool sum = reduce == "sum" || reduce == "add";
  if (sum && include_self) return sumInto(x, src);
  Value* zeros = cx.emit("full", {}, {{"shape", x->shape()}, {"value", 0.0}, {"dtype", t}});
  Value* ones = cx.emit("full", {}, {{"shape", index->shape()}, {"value", 1.0}, {"dtype", t}});
  Value* counts = sumInto(zeros, ones);
  Value* hit = cx.emit("gt", {counts, cx.scalar(0, t)});
  // Elements no index hits keep x's value; a value scatter writes the value
  // wherever an index hits, duplicates or not.
  if (plain && !given_src) return cx.emit("where", {hit, cx.scalar(value, t), x});
  if (plain || sum) return cx.emit("where", {hit, sumInto(zeros, src), x});
  if (reduce == "mean") {
    Value* total = sumInto(include_self ? x : zeros, src);
    // Without x, elements no index hits would divide by 0; they keep x anyway.
    Value* n = include_self ? cx.emit("add", {counts, cx.scalar(1, t)}) : cx.emit("where", {hit, counts, cx.scalar(1, t)});
    Value* mean = cx.emit("div", {total, n});
    return include_self ? mean : cx.emit("where", {hit, mean, x});
  }
  fail("scatter with reduce=" + reduce + " is not supported (sum, add and mean are)");
}

/// one_hot(x, num_classes): [*, num_classes] i64, 1 where the class is x's value.
template <class Cx>
Value* oneHot(Cx& cx, Value* x, int64_t classes) {
  if (classes < 0) fail("one_hot() without num_classes has a data-dependent shape; pass num_classes");
  if (!isIntegral(x->dtype()) || x->dtype() == DType::Bool) fail("one_hot needs an integer tensor, got " + x->type().str());
  Shape s = x->shape();
  s.push_back(1);
  Value* r = cx.emit("arange", {}, {{"end", static_cast<double>(classes)}, {"dtype", x->dtype()}});
  return cx.cast(cx.emit("eq", {reshapedTo(cx, x, s), r}), DType::I64);
}

/// take_along_dim(x, indices, dim): gather after broadcasting x and indices
/// over every dim but `dim`; without a dim, both flattened.
template <class Cx>
Value* takeAlongDim(Cx& cx, Value* x, Value* idx, std::optional<int64_t> dim) {
  if (!dim) {
    x = reshapedTo(cx, x, {x->type().numel()});
    idx = reshapedTo(cx, idx, {idx->type().numel()});
    dim = 0;
  }
  if (x->type().rank() != idx->type().rank())
    fail("take_along_dim needs indices with as many dims as the input: " + idx->type().str() + " for " +
         x->type().str());
  const int64_t d = normalizeAxis(*dim, x->type().rank());
  Shape xs = x->shape(), is = idx->shape();
  xs[d] = 1, is[d] = 1;
  const Shape common = broadcastShapes(xs, is);
  xs = common, is = common;
  xs[d] = x->shape()[d], is[d] = idx->shape()[d];
  return cx.emit("gather", {expandedTo(cx, x, xs), expandedTo(cx, idx, is)}, {{"dim", d}});
}

/// torch.einsum(equation, operands): each operand's subscripts (with `...`
/// for broadcast dims), an optional `->` output (else the letters used once,
/// sorted, after the broadcast dims). Operands are contracted left to right
/// as PyTorch does: letters used by one operand only and not kept are
/// summed first; each pair becomes one batched matmul over
/// [batch, kept-of-A, contracted] x [batch, contracted, kept-of-B]; letters
/// left over are summed at the end and the result permuted to the output.
/// Repeated letters within one operand (diagonals, "ii->i") fail.
template <class Cx>
Value* einsum(Cx& cx, const std::string& equation, const std::vector<Value*>& operands) {
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != operands.size())
    fail("einsum: " + quoteText(equation) + " has " + std::to_string(terms.size()) + " operands, " +
         std::to_string(operands.size()) + " tensors were given");
  // Broadcast dims ("...") become letters of their own: '0'..'9' then more, right-aligned.
  int64_t ell = 0;
  for (size_t k = 0; k < terms.size(); ++k)
    if (terms[k].find("...") != std::string::npos)
      ell = std::max<int64_t>(ell, operands[k]->type().rank() - static_cast<int64_t>(terms[k].size() - 3));
  auto ellLetters = [&](int64_t n) {
    std::string l;
    for (int64_t i = ell - n; i < ell; ++i) l += static_cast<char>(1 + i);  // control characters: never user letters
    return l;
  };
  std::vector<std::string> subs;
  for (size_t k = 0; k < terms.size(); ++k) {
    std::string t = terms[k];
    const size_t dots = t.find("...");
    if (dots != std::string::npos)
      t = t.substr(0, dots) + ellLetters(operands[k]->type().rank() - static_cast<int64_t>(t.size() - 3)) +
          t.substr(dots + 3);
    if (static_cast<int64_t>(t.size()) != operands[k]->type().rank())
      fail("einsum: operand " + std::to_string(k) + " is " + operands[k]->type().str() + ", its subscripts " +
           quoteText(terms[k]) + " name " + std::to_string(t.size()) + " dims");
    for (size_t i = 0; i < t.size(); ++i)
      if (t.find(t[i], i + 1) != std::string::npos)
        fail("einsum: " + quoteText(equation) + " repeats a subscript within one operand (a diagonal); not supported");
    subs.push_back(t);
  }
  std::string out;
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
    const size_t dots = out.find("...");
    if (dots != std::string::npos) out = out.substr(0, dots) + ellLetters(ell) + out.substr(dots + 3);
  } else {
    std::map<char, int> count;
    for (const std::string& t : subs)
      for (char c : t) count[c]++;
    out = ellLetters(ell);
    for (const auto& [c, n] : count)
      if (n == 1 && static_cast<unsigned char>(c) > static_cast<unsigned char>(ell)) out += c;
  }
  // The size of every letter (broadcast: the one that is not 1).
  std::map<char, int64_t> size;
  for (size_t k = 0; k < subs.size(); ++k)
    for (size_t i = 0; i < subs[k].size(); ++i) {
      const int64_t n = operands[k]->shape()[i];
      auto [it, fresh] = size.emplace(subs[k][i], n);
      if (!fresh && it->second != n) {
        if (it->second != 1 && n != 1)
          fail("einsum: subscript " + std::string(1, subs[k][i]) + " has sizes " + std::to_string(it->second) +
               " and " + std::to_string(n));
        it->second = std::max(it->second, n);
      }
    }
  for (char c : out)
    if (!size.count(c)) fail("einsum: output subscript " + std::string(1, c) + " appears in no operand");
  // Letters still needed after operand k: the output's and later operands'.
  auto neededAfter = [&](size_t k) {
    std::string need = out;
    for (size_t j = k + 1; j < subs.size(); ++j) need += subs[j];
    return need;
  };
  auto has = [](const std::string& s, char c) { return s.find(c) != std::string::npos; };
  // Sum the dims of `v` (letters `l`) that `keep` does not name.
  auto sumOut = [&](Value* v, std::string& l, const std::string& keep) {
    std::vector<int64_t> dims;
    std::string left;
    for (size_t i = 0; i < l.size(); ++i)
      if (has(keep, l[i]))
        left += l[i];
      else
        dims.push_back(static_cast<int64_t>(i));
    l = left;
    if (dims.empty()) return v;
    return cx.emit("sum", {v}, {{"dims", dims}, {"keepdim", int64_t{0}}});
  };
  // `v` (letters `l`) permuted to `order` and reshaped to `groups` (sizes broadcast to the letters' sizes).
  auto arrange = [&](Value* v, const std::string& l, const std::string& order, const std::vector<std::string>& groups) {
    std::vector<int64_t> perm;
    for (char c : order) perm.push_back(static_cast<int64_t>(l.find(c)));
    bool identity = true;
    for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == static_cast<int64_t>(i);
    if (!identity) v = cx.emit("permute", {v}, {{"dims", perm}});
    Shape full;
    for (char c : order) full.push_back(size[c]);
    v = expandedTo(cx, v, full);
    Shape g;
    for (const std::string& grp : groups) {
      int64_t n = 1;
      for (char c : grp) n *= size[c];
      g.push_back(n);
    }
    return reshapedTo(cx, v, g);
  };
  std::string acc_l = subs[0];
  Value* acc = sumOut(operands[0], acc_l, neededAfter(0) + "");
  for (size_t k = 1; k < subs.size(); ++k) {
    std::string bl = subs[k];
    const std::string need = neededAfter(k);
    Value* b = sumOut(operands[k], bl, need + acc_l);
    std::string batch, contract, a_only, b_only;
    for (char c : acc_l) {
      if (has(bl, c)) (has(need, c) ? batch : contract) += c;
      else a_only += c;
    }
    for (char c : bl)
      if (!has(acc_l, c)) b_only += c;
    Value* am = arrange(acc, acc_l, batch + a_only + contract, {batch, a_only, contract});
    Value* bm = arrange(b, bl, batch + contract + b_only, {batch, contract, b_only});
    Value* prod = cx.emit("matmul", {am, bm});
    Shape rs;
    for (char c : batch + a_only + b_only) rs.push_back(size[c]);
    acc = reshapedTo(cx, prod, rs);
    acc_l = batch + a_only + b_only;
  }
  acc = sumOut(acc, acc_l, out);
  Shape full;
  for (char c : out) full.push_back(size[c]);
  std::vector<int64_t> perm;
  for (char c : out) perm.push_back(static_cast<int64_t>(acc_l.find(c)));
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == static_cast<int64_t>(i);
  if (!identity) acc = cx.emit("permute", {acc}, {{"dims", perm}});
  return expandedTo(cx, acc, full);
}

/// scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal, scale,
/// enable_gqa), as F.scaled_dot_product_attention's documented math:
/// softmax(q k^T * scale (+ a float mask, or -inf where a bool mask is
/// false; a causal mask keeps j <= i)) v, with dropout on the weights. GQA:
/// k and v heads (dim -3) repeated to q's.
template <class Cx>
Value* sdpa(Cx& cx, Value* q, Value* k, Value* v, Value* mask, double dropout_p, bool is_causal,
            std::optional<double> scale, bool gqa = false) {
  const DType t = q->dtype();
  const int64_t r = q->type().rank();
  if (r < 2 || k->type().rank() != r || v->type().rank() != r)
    fail("scaled_dot_product_attention needs query, key and value of one rank >= 2, got " + q->type().str() + ", " +
         k->type().str() + ", " + v->type().str());
  if (gqa && r >= 3 && k->shape()[r - 3] != q->shape()[r - 3]) {
    const int64_t hq = q->shape()[r - 3], hk = k->shape()[r - 3];
    if (hk <= 0 || hq % hk) fail("enable_gqa: " + std::to_string(hq) + " query heads over " + std::to_string(hk) + " key heads");
    std::vector<int64_t> idx;
    for (int64_t h = 0; h < hq; ++h) idx.push_back(h / (hq / hk));
    Value* rep = cx.constInput(Tensor::fromInt64s({hq}, idx));
    k = cx.emit("index", {k, rep}, {{"dim", r - 3}});
    v = cx.emit("index", {v, rep}, {{"dim", r - 3}});
  }
  const int64_t L = q->shape()[r - 2], S = k->shape()[r - 2], E = q->shape()[r - 1];
  std::vector<int64_t> swap(static_cast<size_t>(r));
  for (int64_t d = 0; d < r; ++d) swap[static_cast<size_t>(d)] = d;
  std::swap(swap[static_cast<size_t>(r - 1)], swap[static_cast<size_t>(r - 2)]);
  Value* kt = cx.emit("permute", {k}, {{"dims", swap}});
  const double s = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(E));
  Value* att = cx.emit("mul", {cx.emit("matmul", {q, kt}), cx.scalar(s, t)});
  const double ninf = -std::numeric_limits<double>::infinity();
  if (is_causal) {
    Value* ones = cx.emit("full", {}, {{"shape", Shape{L, S}}, {"value", 1.0}, {"dtype", DType::Bool}});
    Value* keep = cx.emit("tril", {ones}, {{"diagonal", int64_t{0}}});
    att = cx.emit("where", {keep, att, cx.scalar(ninf, t)});
  }
  if (mask)
    att = mask->dtype() == DType::Bool ? cx.emit("where", {mask, att, cx.scalar(ninf, t)})
                                       : cx.emit("add", {att, cx.cast(mask, t)});
  att = cx.emit("softmax", {att}, {{"dim", r - 1}});
  if (dropout_p > 0) att = cx.emitNode("dropout", {att}, {{"p", dropout_p}, {"training", int64_t{1}}})->output(0);
  return cx.emit("matmul", {att, v});
}

/// rms_norm(x, normalized_shape, weight, eps) and rstd: x * rsqrt(mean(x^2)
/// over the trailing normalized dims + eps) (* weight), computed in f32 for
/// bf16/f16 input and cast back, as PyTorch's decomposition; eps unset: the
/// dtype's machine epsilon (torch.finfo).
template <class Cx>
std::pair<Value*, Value*> rmsNorm(Cx& cx, Value* x, const std::vector<int64_t>& normalized, Value* weight,
                                  std::optional<double> eps) {
  const int64_t r = x->type().rank(), n = static_cast<int64_t>(normalized.size());
  if (n == 0 || n > r) fail("rms_norm: normalized_shape has " + std::to_string(n) + " dims for " + x->type().str());
  for (int64_t i = 0; i < n; ++i)
    if (x->shape()[static_cast<size_t>(r - n + i)] != normalized[static_cast<size_t>(i)])
      fail("rms_norm: normalized_shape does not match the trailing dims of " + x->type().str());
  const DType in = x->dtype();
  if (!isFloating(in)) fail("rms_norm needs a floating input, got " + x->type().str());
  const DType t = isLowPrecisionFloat(in) ? DType::F32 : in;
  const double e = eps ? *eps
                       : in == DType::F64 ? 2.220446049250313e-16
                       : in == DType::BF16 ? 0.0078125
                       : in == DType::F16 ? 0.0009765625
                                          : 1.1920928955078125e-07;
  Value* xf = cx.cast(x, t);
  std::vector<int64_t> dims;
  for (int64_t d = r - n; d < r; ++d) dims.push_back(d);
  Value* ms = cx.emit("mean", {cx.emit("mul", {xf, xf})}, {{"dims", dims}, {"keepdim", int64_t{1}}});
  Value* rstd = cx.emit("rsqrt", {cx.emit("add", {ms, cx.scalar(e, t)})});
  Value* y = cx.emit("mul", {xf, rstd});
  if (weight) y = cx.emit("mul", {y, cx.cast(weight, t)});
  return {cx.cast(y, in), rstd};
}

}  // namespace kiln::decomp
