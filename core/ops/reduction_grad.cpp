// Gradient rules for the reduction family (see core/grad.h). Formulas follow
// PyTorch's FunctionsManual.cpp: amax/amin share the gradient evenly among
// tied extremes, prod handles zeros (one zero: only that element gets the
// product of the others; several: none), var scales by 2 / (N - correction).
//
// prod_backward(g, x, y) {dims, keepdim} is registered here: the product of
// the other elements of each slice times g, with the zero cases; composing
// it from existing ops would take about ten nodes. Kernel in
// backend/cpu/kernels_elementwise_grad.cpp.
#include "core/grad.h"
#include "core/ops/op_helpers.h"

namespace kiln {
namespace {

std::vector<int64_t> axesOf(GradContext& c) {
  return reductionAxes(c.node(), c.node().is("dims"), static_cast<int64_t>(c.in(0)->shape().size()));
}

/// `v` (a reduction's output or its gradient) reshaped to keep the reduced
/// dims as size 1, so it broadcasts against the input.
Value* keptDims(GradContext& c, Value* v) {
  Shape kept = reducedShape(c.in(0)->shape(), axesOf(c), true);
  if (v->shape() == kept) return v;
  return c.op("reshape", {v}, {{"shape", std::vector<int64_t>(kept.begin(), kept.end())}});
}

/// Gradient of a reduction's output broadcast back to the input's shape.
Value* expandReduced(GradContext& c, Value* g) {
  const Shape& in = c.in(0)->shape();
  return c.op("expand", {keptDims(c, g)}, {{"shape", std::vector<int64_t>(in.begin(), in.end())}});
}

/// Number of input elements that went into each output element.
double reducedCount(GradContext& c) {
  double count = 1;
  for (int64_t a : axesOf(c)) count *= static_cast<double>(c.in(0)->shape()[a]);
  return count;
}

void sumGrad(GradContext& c) {
  c.setGrad(0, expandReduced(c, c.grad()));
}

void meanGrad(GradContext& c) {
  const TensorType& in = c.in(0)->type();
  double count = static_cast<double>(in.numel()) / static_cast<double>(std::max<int64_t>(c.out()->type().numel(), 1));
  Value* scaled = c.op("div", {c.grad(), c.scalar(count, c.grad()->dtype())});
  c.setGrad(0, expandReduced(c, scaled));
}

void extremeGrad(GradContext& c) {
  // (g / count of ties) * (x == y), as PyTorch's scale_grad_by_count: a NaN
  // extreme matches nothing, so its slice gets (g / 0) * 0 = NaN there too.
  Value* mask = c.op("eq", {c.in(0), keptDims(c, c.out())});
  Value* count = c.op("sum", {mask}, {{"dims", axesOf(c)}, {"keepdim", int64_t{1}}});
  Value* share = c.op("div", {keptDims(c, c.grad()), count});
  c.setGrad(0, c.op("mul", {share, mask}));
}

void prodGrad(GradContext& c) {
  c.setGrad(0, c.op("prod_backward", {c.grad(), c.in(0), c.out()}, c.node().attrs()));
}

void varGrad(GradContext& c) {
  // (2 / (N - correction)) * g * (x - mean): N == correction gives inf (and
  // NaN where x equals the mean), as PyTorch's var_backward with dims.
  double scale = 2.0 / (reducedCount(c) - c.node().f("correction"));
  Value* mean = c.op("mean", {c.in(0)}, {{"dims", axesOf(c)}, {"keepdim", int64_t{1}}});
  Value* centered = c.op("sub", {c.in(0), mean});
  Value* g = c.op("mul", {c.scalar(scale, c.grad()->dtype()), keptDims(c, c.grad())});
  c.setGrad(0, c.op("mul", {g, centered}));
}

void cumsumGrad(GradContext& c) {
  // Each input feeds every later output: a reversed cumulative sum.
  if (c.in(0)->shape().empty()) return c.setGrad(0, c.grad());
  int64_t d = normalizeAxis(c.node().i("dim"), static_cast<int64_t>(c.in(0)->shape().size()));
  AttrMap along{{"dims", std::vector<int64_t>{d}}};
  Value* rev = c.op("cumsum", {c.op("flip", {c.grad()}, along)}, {{"dim", d}});
  c.setGrad(0, c.op("flip", {rev}, along));
}

/// x_k feeds every later output: dy_j/dx_k = prod_{i<=j, i!=k} x_i. PyTorch's
/// cumprod_backward: before the first zero of a slice, the reversed cumsum
/// of g * y divided by x, the terms from the first zero on masked to 0 (so
/// an inf before a zero meets no 0 * inf); at the first zero, the reversed
/// cumsum of g times the cumprod of x with that zero taken as 1, over the
/// terms before the second zero only; after it, 0 (every product holds the
/// zero).
void cumprodGrad(GradContext& c) {
  const auto rank = static_cast<int64_t>(c.in(0)->shape().size());
  if (rank == 0) return c.setGrad(0, c.grad());
  const int64_t d = normalizeAxis(c.node().i("dim"), rank);
  const AttrMap along{{"dims", std::vector<int64_t>{d}}}, at{{"dim", d}};
  auto reversedCumsum = [&](Value* v) {
    return c.op("flip", {c.op("cumsum", {c.op("flip", {v}, along)}, at)}, along);
  };
  Value* x = c.in(0);
  const DType t = x->dtype();
  Value* zero = c.scalar(0.0, t);
  Value* one = c.scalar(1.0, t);
  Value* is_zero = c.op("eq", {x, zero});
  Value* zeros_so_far = c.op("cumsum", {c.op("cast", {is_zero}, {{"dtype", DType::I64}})}, at);
  Value* before = c.op("eq", {zeros_so_far, c.scalar(0.0, DType::I64)});
  Value* one_zero = c.op("eq", {zeros_so_far, c.scalar(1.0, DType::I64)});
  Value* first = c.op("logical_and", {is_zero, one_zero});
  Value* g = c.grad();
  Value* lead_terms = c.op("where", {before, c.op("mul", {g, c.out()}), zero});
  Value* lead = c.op("div", {reversedCumsum(lead_terms), c.op("where", {before, x, one})});
  Value* skip_zero = c.op("cumprod", {c.op("where", {first, one, x})}, at);
  Value* at_zero = reversedCumsum(c.op("where", {one_zero, c.op("mul", {g, skip_zero}), zero}));
  c.setGrad(0, c.op("where", {before, lead, c.op("where", {first, at_zero, zero})}));
}

std::vector<TensorType> inferProdBackward(const Node& n) {
  const TensorType& g = n.input(0)->type();
  const TensorType& x = n.input(1)->type();
  if (!isFloating(x.dtype) || g.dtype != x.dtype || n.input(2)->dtype() != x.dtype)
    opFail(n, "needs floating inputs of one dtype, got " + g.str() + ", " + x.str() + ", " + n.input(2)->type().str());
  auto axes = reductionAxes(n, n.is("dims"), x.rank());
  Shape out = reducedShape(x.shape, axes, n.i("keepdim") != 0);
  if (g.shape != out || n.input(2)->shape() != out)
    opFail(n, "gradient " + g.str() + " and result " + n.input(2)->type().str() + " must have the reduced shape " +
                  shapeStr(out) + " of " + x.str());
  return {x};
}

Cost prodBackwardCost(const Node& n) {
  return {4.0 * static_cast<double>(n.input(1)->type().numel()), ioBytes(n)};
}

}  // namespace

void registerReductionGrads(OpTable& t) {
  t.add({"prod_backward",
         "gradient of prod from (g, x, y): g times the product of the other slice elements",
         3,
         3,
         0,
         {optAttr("dims", std::vector<int64_t>{}), optAttr("keepdim", int64_t{0})},
         inferProdBackward,
         prodBackwardCost});

  t.setGrad("sum", sumGrad);
  t.setGrad("mean", meanGrad);
  t.setGrad("amax", extremeGrad);
  t.setGrad("amin", extremeGrad);
  t.setGrad("prod", prodGrad);
  t.setGrad("var", varGrad);
  t.setGrad("cumsum", cumsumGrad);
  t.setGrad("cumprod", cumprodGrad);
  for (const char* r : {"argmax", "argmin", "topk"}) t.setNoGrad(r, "integer result");
}

}  // namespace kiln
