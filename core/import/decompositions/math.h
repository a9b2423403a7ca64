// Shared decompositions (see common.h): elementwise activations and
// arithmetic PyTorch has and Kiln builds from its ops (truncating division,
// ELU/SELU/CELU, PReLU, shrinks, GLU, xlogy) and reductions (logsumexp, p-norms).
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

/// xlogy(x, y) = x log(y), 0 where x == 0 unless y is NaN (x, y of one floating dtype).
template <class Cx>
Value* xlogy(Cx& cx, Value* x, Value* y) {
  Value* zero_x = cx.emit("logical_and", {cx.emit("eq", {x, cx.scalar(0, x->dtype())}), cx.emit("eq", {y, y})});
  return cx.emit("where", {zero_x, cx.scalar(0, x->dtype()), cx.emit("mul", {x, cx.emit("log", {y})})});
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

}  // namespace kiln::decomp
