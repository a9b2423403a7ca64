// Shared decompositions (see common.h): elementwise activations and
// arithmetic PyTorch has and Kiln builds from its ops (truncating division,
// ELU/SELU/CELU, PReLU, shrinks, GLU) and reductions (logsumexp, p-norms).
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "core/import/decompositions/common.h"

namespace kiln::decomp {

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
/// A NaN takes the exponential side (NaN, and a NaN gradient, as the
/// vectorized loop of PyTorch's CPU elu_backward gives); that side reads x
/// only where it is taken (0 elsewhere), so a large x meets no 0 * inf in
/// the backward.
template <class Cx>
Value* elu(Cx& cx, Value* x, double alpha, double scale, double input_scale) {
  const DType t = x->dtype();
  if (input_scale == 1.0) {
    Value* e = cx.emit("elu", {x}, {{"alpha", alpha}});
    return scale == 1.0 ? e : cx.emit("mul", {e, cx.scalar(scale, t)});
  }
  Value* pos_side = cx.emit("gt", {x, cx.scalar(0.0, t)});
  Value* xn = cx.emit("where", {pos_side, cx.scalar(0.0, t), x});
  Value* pos = scale == 1.0 ? x : cx.emit("mul", {x, cx.scalar(scale, t)});
  Value* em1 = cx.emit("sub", {cx.emit("exp", {cx.emit("mul", {xn, cx.scalar(input_scale, t)})}), cx.scalar(1.0, t)});
  Value* neg = cx.emit("mul", {em1, cx.scalar(alpha * scale, t)});
  return cx.emit("where", {pos_side, pos, neg});
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

/// hardshrink: |x| > l ? x : x * 0 (0, or NaN for a NaN, which gets no
/// gradient); softshrink: x - l above l, x + l below -l, else 0 (a NaN too).
/// Both as the vectorized loops of PyTorch's CPU kernels, forward and backward.
template <class Cx>
Value* shrink(Cx& cx, Value* x, double l, bool hard) {
  const DType t = x->dtype();
  Value* zero = cx.scalar(0, t);
  if (hard)
    return cx.emit("where", {cx.emit("gt", {cx.emit("abs", {x}), cx.scalar(l, t)}), x, cx.emit("mul", {x, zero})});
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

/// max() / min() over all elements, with PyTorch's evenly_distribute_backward:
/// the gradient split among the elements equal to the result, and when the
/// result is NaN among the NaNs (amax's tie mask, x == result, finds none
/// and would give NaN everywhere).
template <class Cx>
Value* extremeOfAll(Cx& cx, Value* x, bool is_max) {
  const DType t = x->dtype();
  auto all = [&](const char* op, Value* v) {
    return cx.emit(op, {v}, {{"dims", std::vector<int64_t>{}}, {"keepdim", int64_t{0}}});
  };
  if (!isFloating(t)) return all(is_max ? "amax" : "amin", x);
  Value* nan = cx.emit("ne", {x, x});
  Value* nan_f = cx.cast(nan, t);
  Value* nans = all("sum", nan_f);
  Value* fill = cx.scalar(is_max ? -INFINITY : INFINITY, t);
  Value* without_nan = all(is_max ? "amax" : "amin", cx.emit("where", {nan, fill, x}));
  // NaN when x holds one; its gradient g / (number of NaNs) at each NaN.
  Value* nan_mean =
      cx.emit("div", {all("sum", cx.emit("mul", {x, nan_f})), cx.emit("maximum", {nans, cx.scalar(1, t)})});
  return cx.emit("where", {cx.emit("gt", {nans, cx.scalar(0, t)}), nan_mean, without_nan});
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

/// sqrt(v) whose gradient is 0 where v == 0 instead of 0 * inf = NaN, as
/// PyTorch's norm_backward and std_backward define it (their
/// `masked_fill_(result == 0, 0)`): sqrt of a select that never sees the
/// zero, selected away again, so neither branch's gradient meets the pole.
/// The forward is sqrt(v) exactly (sqrt(0) = 0).
template <class Cx>
Value* zeroMaskedSqrt(Cx& cx, Value* v) {
  const DType t = v->dtype();
  Value* zero = cx.emit("eq", {v, cx.scalar(0, t)});
  Value* root = cx.emit("sqrt", {cx.emit("where", {zero, cx.scalar(1, t), v})});
  return cx.emit("where", {zero, cx.scalar(0, t), root});
}

/// The p-norm of floating x over `dims` (normalized; empty = all) for p = 1,
/// 2, inf, with PyTorch's norm_backward at the singular points: p = 2's
/// gradient is 0 for an all-zero vector (zeroMaskedSqrt); p = inf's is 0 for
/// a vector holding a NaN (PyTorch's mask keeps the NaN's position and its
/// sgn(NaN) = 0), and split among the ties of the largest magnitude.
template <class Cx>
Value* pnorm(Cx& cx, Value* x, double p, const std::vector<int64_t>& dims, bool keep) {
  auto reduce = [&](const char* op, Value* v) {
    return cx.emit(op, {v}, {{"dims", dims}, {"keepdim", int64_t{keep}}});
  };
  if (p == 2) return zeroMaskedSqrt(cx, reduce("sum", cx.emit("mul", {x, x})));
  if (p == 1) return reduce("sum", cx.emit("abs", {x}));
  if (std::isinf(p) && p > 0) {
    // amax over the magnitudes with NaN read as 0 (so no gradient reaches a
    // NaN vector through amax's tie mask), and NaN put back as the value.
    const DType t = x->dtype();
    Value* nan = cx.emit("ne", {x, x});
    Value* mag = cx.emit("where", {nan, cx.scalar(0, t), cx.emit("abs", {x})});
    Value* has_nan = cx.emit("gt", {reduce("amax", cx.cast(nan, t)), cx.scalar(0, t)});
    return cx.emit("where", {has_nan, cx.scalar(NAN, t), reduce("amax", mag)});
  }
  fail("only p = 1, 2 and inf norms are supported, got p = " + std::to_string(p));
}

/// cosine_similarity(x1, x2, dim, eps) as PyTorch writes it: both broadcast,
/// each divided by its L2 norm over dim clamped to at least eps, multiplied
/// and summed over dim. PyTorch clamps the norm in place under no_grad, so
/// the norm's backward reads the clamped value c: the gradient reaching the
/// norm goes on to x as dL/dc * x / c, also below eps, and is 0 for an
/// all-zero vector. Here c = detach(max(n, eps)) + (n - detach(n)) *
/// detach(n / c): the value is c (the second term is 0 wherever the output is
/// not NaN anyway) and its gradient (n / c) * dn/dx = x / c.
template <class Cx>
Value* cosineSimilarity(Cx& cx, Value* x1, Value* x2, int64_t dim, double eps) {
  Shape s = broadcastShapes(x1->shape(), x2->shape());
  x1 = expandedTo(cx, x1, s);
  x2 = expandedTo(cx, x2, s);
  const std::vector<int64_t> d{normalizeAxis(dim, static_cast<int64_t>(s.size()))};
  auto unit = [&](Value* x) {
    Value* n = pnorm(cx, x, 2, d, true);
    Value* c = cx.emit("maximum", {n, cx.scalar(eps, x->dtype())});
    Value* through =
        cx.emit("mul", {cx.emit("sub", {n, cx.emit("detach", {n})}), cx.emit("detach", {cx.emit("div", {n, c})})});
    return cx.emit("div", {x, cx.emit("add", {cx.emit("detach", {c}), through})});
  };
  return cx.emit("sum", {cx.emit("mul", {unit(x1), unit(x2)})}, {{"dims", d}, {"keepdim", int64_t{0}}});
}

}  // namespace kiln::decomp
