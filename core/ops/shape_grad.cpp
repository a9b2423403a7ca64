// Gradient rules for the shape family (see core/grad.h): every layout op of
// core/ops/shape.cpp moves elements without arithmetic, so each gradient is
// the adjoint data movement of the output gradient.
//
//   reshape/permute/roll/flip/triu/tril  the same kind of op on the gradient
//   expand/repeat                        sums over the copies
//   cat/split                            slices / concatenation of the gradient
//   slice/select/pad                     the gradient put back into zeros
//   index/gather                         scatter-add (duplicates accumulate)
//
// Backward ops registered here (CPU kernels in backend/cpu/kernels_shape_grad.cpp):
//   slice_backward(g) {input_shape, dim, start, end, step}   zeros, g in x[start:end:step]
//   select_backward(g) {input_shape, dim, index}             zeros, g at x[index]
//   pad_backward(g) {input_shape, pads, mode}                sums what F.pad copied
//   index_add(base, index, src) {dim}     adjoint of `index`: base plus src added at the indices
//   scatter_add(base, index, src) {dim}   torch.scatter_add (adjoint of `gather`)
// The two *_add ops are general forward ops (with rules of their own); the
// *_backward ops take the input's shape as an attribute so the forward input
// need not stay alive for the backward, and they have rules too (the forward
// op again), so second derivatives go through.
#include <algorithm>
#include <limits>

#include "core/grad.h"
#include "core/ops/op_helpers.h"

namespace kiln {
namespace {

using Ints = std::vector<int64_t>;  // the same type as Shape

// ---- backward ops: shape inference -------------------------------------------

/// The `input_shape` attribute: non-negative dims.
Shape inputShapeAttr(const Node& n) {
  const Ints& s = n.is("input_shape");
  for (int64_t d : s)
    if (d < 0) opFail(n, "input_shape " + shapeStr(s) + " has a negative dimension");
  return Shape(s.begin(), s.end());
}

int64_t axisOf(const Node& n, int64_t rank) {
  try {
    return normalizeAxis(n.i("dim"), rank);
  } catch (const KilnException& e) {
    opFail(n, e.what());
  }
}

void requireGradShape(const Node& n, const Shape& expect) {
  if (n.input(0)->shape() != expect)
    opFail(n, "gradient " + n.input(0)->type().str() + " does not match the forward output shape " + shapeStr(expect));
}

std::vector<TensorType> inferSliceBackward(const Node& n) {
  Shape in = inputShapeAttr(n);
  if (in.empty()) opFail(n, "cannot slice a 0-d tensor");
  int64_t axis = axisOf(n, static_cast<int64_t>(in.size()));
  if (n.i("step") <= 0) opFail(n, "slice step must be positive");
  Shape out = in;
  out[axis] = normalizeSlice(in[axis], n.i("start"), n.i("end"), n.i("step")).length;
  requireGradShape(n, out);
  return {{n.input(0)->dtype(), in}};
}

std::vector<TensorType> inferSelectBackward(const Node& n) {
  Shape in = inputShapeAttr(n);
  if (in.empty()) opFail(n, "cannot select from a 0-d tensor");
  int64_t axis = axisOf(n, static_cast<int64_t>(in.size()));
  int64_t idx = n.i("index"), size = in[axis];
  if (idx < -size || idx >= size)
    opFail(n, "index " + std::to_string(idx) + " is out of range for size " + std::to_string(size));
  Shape out = in;
  out.erase(out.begin() + axis);
  requireGradShape(n, out);
  return {{n.input(0)->dtype(), in}};
}

std::vector<TensorType> inferPadBackward(const Node& n) {
  Shape in = inputShapeAttr(n);
  const Ints& pads = n.is("pads");
  const auto rank = static_cast<int64_t>(in.size());
  if (pads.size() % 2 || static_cast<int64_t>(pads.size() / 2) > rank)
    opFail(n, "pads " + shapeStr(pads) + " must be pairs for at most rank dims");
  const std::string& mode = n.s("mode");
  if (mode != "constant" && mode != "reflect" && mode != "replicate" && mode != "circular")
    opFail(n, "unknown pad mode '" + mode + "'");
  if (!isFloating(n.input(0)->dtype())) opFail(n, "gradient must be floating, got " + n.input(0)->type().str());
  Shape out = in;
  for (size_t i = 0; i < pads.size() / 2; ++i) {
    int64_t axis = rank - 1 - static_cast<int64_t>(i);  // pads run from the last dim backwards
    out[axis] += pads[2 * i] + pads[2 * i + 1];
    if (out[axis] < 0) opFail(n, "negative padding removes more than the dimension holds");
  }
  requireGradShape(n, out);
  return {{n.input(0)->dtype(), in}};
}

/// Common checks of index_add / scatter_add: floating base and src of one
/// dtype, an integer index.
void checkAddOperands(const Node& n) {
  const TensorType &base = n.input(0)->type(), &idx = n.input(1)->type(), &src = n.input(2)->type();
  if (!isFloating(base.dtype)) opFail(n, "base must be floating, got " + base.str());
  if (src.dtype != base.dtype) opFail(n, "src " + src.str() + " must have the dtype of base " + base.str());
  if (!isIntegral(idx.dtype)) opFail(n, "index tensor must be an integer type, got " + idx.str());
}

std::vector<TensorType> inferIndexAdd(const Node& n) {
  checkAddOperands(n);
  const TensorType &base = n.input(0)->type(), &idx = n.input(1)->type(), &src = n.input(2)->type();
  int64_t axis = axisOf(n, base.rank());
  // src has the shape `index(base, index)` has: base.shape[:dim] + index.shape + base.shape[dim+1:].
  Shape expect;
  if (base.rank() == 0) {
    expect = idx.shape;
  } else {
    expect.assign(base.shape.begin(), base.shape.begin() + axis);
    expect.insert(expect.end(), idx.shape.begin(), idx.shape.end());
    expect.insert(expect.end(), base.shape.begin() + axis + 1, base.shape.end());
  }
  if (src.shape != expect)
    opFail(n, "src " + src.str() + " must have shape " + shapeStr(expect) + " for base " + base.str() + " and index " +
                  idx.str());
  return {base};
}

std::vector<TensorType> inferScatterAdd(const Node& n) {
  checkAddOperands(n);
  const TensorType &base = n.input(0)->type(), &idx = n.input(1)->type(), &src = n.input(2)->type();
  int64_t axis = axisOf(n, base.rank());
  if (idx.rank() != base.rank() || src.rank() != base.rank())
    opFail(n, "base " + base.str() + ", index " + idx.str() + " and src " + src.str() + " must have the same rank");
  for (int64_t d = 0; d < idx.rank(); ++d)
    if (idx.shape[d] > src.shape[d] || (d != axis && idx.shape[d] > base.shape[d]))
      opFail(n, "index " + idx.str() + " must be no larger than src " + src.str() + " and, outside dim " +
                    std::to_string(axis) + ", than base " + base.str());
  return {base};
}

/// scatter_reduce: base's type; index and src of one shape (the importers
/// cut src to index's extent), no larger than base outside dim.
std::vector<TensorType> inferScatterReduce(const Node& n) {
  const std::vector<TensorType> out = inferScatterAdd(n);
  if (n.input(1)->shape() != n.input(2)->shape())
    opFail(n, "index " + n.input(1)->type().str() + " and src " + n.input(2)->type().str() + " must have one shape");
  if (const std::string& r = n.s("reduce"); r != "prod" && r != "amax" && r != "amin")
    opFail(n, "reduce must be \"prod\", \"amax\" or \"amin\", got \"" + r + "\"");
  return out;
}

Cost moveCost(const Node& n) {
  return {0, ioBytes(n)};
}
/// One add per element of the gradient / src that is accumulated.
Cost accumulateCost(const Node& n) {
  const Value* src = n.input(n.numInputs() == 3 ? 2 : 0);
  return {static_cast<double>(src->type().numel()), ioBytes(n)};
}

// ---- rules ---------------------------------------------------------------------

Ints ints(const Shape& s) {
  return Ints(s.begin(), s.end());
}

void reshapeGrad(GradContext& c) {
  c.setGrad(0, c.op("reshape", {c.grad()}, {{"shape", ints(c.in(0)->shape())}}));
}

void permuteGrad(GradContext& c) {
  const Ints& dims = c.node().is("dims");
  const auto rank = static_cast<int64_t>(dims.size());
  Ints inv(dims.size());
  for (int64_t i = 0; i < rank; ++i) inv[normalizeAxis(dims[i], rank)] = i;
  c.setGrad(0, c.op("permute", {c.grad()}, {{"dims", inv}}));
}

void expandGrad(GradContext& c) {
  c.setGradBroadcast(0, c.grad());
}

void sliceGrad(GradContext& c) {
  const Node& n = c.node();
  c.setGrad(0, c.op("slice_backward", {c.grad()},
                    {{"input_shape", ints(c.in(0)->shape())},
                     {"dim", n.i("dim")},
                     {"start", n.i("start")},
                     {"end", n.i("end")},
                     {"step", n.i("step")}}));
}

void selectGrad(GradContext& c) {
  const Node& n = c.node();
  c.setGrad(0, c.op("select_backward", {c.grad()},
                    {{"input_shape", ints(c.in(0)->shape())}, {"dim", n.i("dim")}, {"index", n.i("index")}}));
}

/// Each input's gradient is its slice of the output gradient.
void catGrad(GradContext& c) {
  const int64_t axis = normalizeAxis(c.node().i("dim"), c.out()->type().rank());
  int64_t start = 0;
  for (size_t i = 0; i < c.numInputs(); ++i) {
    const int64_t len = c.in(i)->shape()[axis];
    if (c.needs(i))
      c.setGrad(i, c.op("slice", {c.grad()}, {{"dim", axis}, {"start", start}, {"end", start + len}, {"step", 1}}));
    start += len;
  }
}

/// The pieces' gradients concatenated; pieces without one contribute zeros.
/// When a single piece has a gradient, slice_backward places it without
/// materializing zeros for the others.
void splitGrad(GradContext& c) {
  const Node& n = c.node();
  const int64_t axis = normalizeAxis(n.i("dim"), c.in(0)->type().rank());
  size_t with = 0, only = 0;
  for (size_t k = 0; k < n.numOutputs(); ++k)
    if (c.grad(k)) ++with, only = k;
  if (with == 1) {
    int64_t start = 0;
    for (size_t k = 0; k < only; ++k) start += c.out(k)->shape()[axis];
    int64_t end = start + c.out(only)->shape()[axis];
    c.setGrad(
        0, c.op("slice_backward", {c.grad(only)},
                {{"input_shape", ints(c.in(0)->shape())}, {"dim", axis}, {"start", start}, {"end", end}, {"step", 1}}));
    return;
  }
  std::vector<Value*> pieces;
  for (size_t k = 0; k < n.numOutputs(); ++k) pieces.push_back(c.gradOrZeros(k));
  c.setGrad(0, pieces.size() == 1 ? pieces[0] : c.op("cat", pieces, {{"dim", axis}}));
}

void rollGrad(GradContext& c) {
  Ints shifts = c.node().is("shifts");
  for (int64_t& s : shifts) s = -s;
  c.setGrad(0, c.op("roll", {c.grad()}, {{"shifts", shifts}, {"dims", c.node().is("dims")}}));
}

void flipGrad(GradContext& c) {
  c.setGrad(0, c.op("flip", {c.grad()}, {{"dims", c.node().is("dims")}}));
}

/// The output walks [r0, s0, r1, s1, ...] (s = the input shape with leading
/// 1s for the dims repeat adds): sum over the r axes.
void repeatGrad(GradContext& c) {
  const Shape& in = c.in(0)->shape();
  const Ints& reps = c.node().is("repeats");
  if (c.grad()->shape() == in) {  // all repeats 1, no new dims
    c.setGrad(0, c.grad());
    return;
  }
  const size_t off = reps.size() - in.size();
  Ints walk, dims;
  for (size_t d = 0; d < reps.size(); ++d) {
    dims.push_back(static_cast<int64_t>(walk.size()));
    walk.insert(walk.end(), {reps[d], d < off ? 1 : in[d - off]});
  }
  Value* g = c.op("reshape", {c.grad()}, {{"shape", walk}});
  g = c.op("sum", {g}, {{"dims", dims}, {"keepdim", int64_t{0}}});
  if (g->shape() != in) g = c.op("reshape", {g}, {{"shape", ints(in)}});
  c.setGrad(0, g);
}

/// Constant padding: the gradient is the output gradient padded by the
/// negated pads (a crop, or zeros where the forward cropped), as PyTorch's
/// constant_pad_nd backward. Other modes sum the copied borders: pad_backward.
void padGrad(GradContext& c) {
  const Node& n = c.node();
  const std::string& mode = n.s("mode");
  if (mode == "constant") {
    Ints neg = n.is("pads");
    for (int64_t& p : neg) p = -p;
    c.setGrad(0, c.op("pad", {c.grad()}, {{"pads", neg}, {"mode", mode}, {"value", 0.0}}));
    return;
  }
  c.setGrad(0, c.op("pad_backward", {c.grad()},
                    {{"input_shape", ints(c.in(0)->shape())}, {"pads", n.is("pads")}, {"mode", mode}}));
}

/// index / gather: the gradient added into zeros at the indices (duplicate
/// indices accumulate). The index input is an integer: no gradient.
void indexGrad(GradContext& c) {
  if (!c.needs(0)) return;
  Value* zeros = c.fill({c.grad()->dtype(), c.in(0)->shape()}, 0.0);
  c.setGrad(0, c.op("index_add", {zeros, c.in(1), c.grad()}, {{"dim", c.node().i("dim")}}));
}

void gatherGrad(GradContext& c) {
  if (!c.needs(0)) return;
  Value* zeros = c.fill({c.grad()->dtype(), c.in(0)->shape()}, 0.0);
  c.setGrad(0, c.op("scatter_add", {zeros, c.in(1), c.grad()}, {{"dim", c.node().i("dim")}}));
}

void triangularGrad(GradContext& c) {
  c.setGrad(0, c.op(c.node().op(), {c.grad()}, {{"diagonal", c.node().i("diagonal")}}));
}

/// scatter_reduce (prod, amax, amin), as PyTorch's scatter_reduce_backward.
/// prod, term for term as PyTorch computes it (so zeros meeting infinities or
/// NaN give its NaNs): self gets g * R_s / s' with s' = self, zeros taken as
/// 1, and R_s the product with s' in place of self; a src element that is
/// its group's only zero among the src elements gets g * R_1 (the product
/// with that zero taken as 1), every other src element (g * result) / x,
/// zeros taken as 1 in the division. amax/amin: the gradient split evenly
/// between self (when equal to the result, counted as PyTorch does even
/// when not included) and the src elements equal to the result. Without
/// include_self, self's gradient is zero where src was scattered.
void scatterReduceGrad(GradContext& c) {
  const Node& n = c.node();
  const AttrMap dim{{"dim", n.i("dim")}};
  const std::string& reduce = n.s("reduce");
  const bool include_self = n.i("include_self") != 0;
  Value *self = c.in(0), *index = c.in(1), *src = c.in(2), *r = c.out(), *g = c.grad();
  const DType t = g->dtype();
  auto gather = [&](Value* v) { return c.op("gather", {v, index}, dim); };
  auto asT = [&](Value* b) { return c.op("cast", {b}, {{"dtype", t}}); };
  auto zerosOf = [&](Value* like) { return c.fill({t, like->shape()}, 0.0); };
  Value* touched = nullptr;  // where src was scattered (without include_self)
  if (!include_self && c.needs(0)) {
    Value* hits = c.op("scatter_add", {zerosOf(self), index, c.fill({t, src->shape()}, 1.0)}, dim);
    touched = c.op("gt", {hits, c.scalar(0, t)});
  }
  if (reduce == "prod") {
    const AttrMap prod{{"dim", n.i("dim")}, {"reduce", std::string("prod")}, {"include_self", n.i("include_self")}};
    Value* zero_t = c.scalar(0, t);
    Value* one = c.scalar(1, t);
    if (c.needs(2)) {
      Value* src_zero = c.op("eq", {src, zero_t});
      Value* src_zeros = gather(c.op("scatter_add", {zerosOf(self), index, asT(src_zero)}, dim));
      Value* single = c.op("logical_and", {src_zero, c.op("eq", {src_zeros, one})});
      Value* without_it = c.op("scatter_reduce", {self, index, c.op("where", {single, one, src})}, prod);
      Value* others = c.op("div", {gather(c.op("mul", {g, r})), c.op("where", {src_zero, one, src})});
      c.setGrad(2, c.op("where", {single, gather(c.op("mul", {g, without_it})), others}));
    }
    if (c.needs(0)) {
      if (include_self) {
        Value* masked_self = c.op("where", {c.op("eq", {self, zero_t}), one, self});
        Value* with_masked = c.op("scatter_reduce", {masked_self, index, src}, prod);
        c.setGrad(0, c.op("div", {c.op("mul", {g, with_masked}), masked_self}));
      } else {
        c.setGrad(0, c.op("where", {touched, zero_t, g}));
      }
    }
    return;
  }
  Value* self_is = asT(c.op("eq", {self, r}));
  Value* src_is = asT(c.op("eq", {src, gather(r)}));
  Value* count = c.op("scatter_add", {self_is, index, src_is}, dim);
  Value* share = c.op("div", {g, count});
  if (c.needs(2)) c.setGrad(2, c.op("mul", {src_is, gather(share)}));
  if (c.needs(0))
    c.setGrad(0, include_self ? c.op("mul", {self_is, share}) : c.op("where", {touched, c.scalar(0, t), g}));
}

// ---- rules of the backward ops (their adjoints are the forward ops) -----------

void sliceBackwardGrad(GradContext& c) {
  const Node& n = c.node();
  c.setGrad(0, c.op("slice", {c.grad()},
                    {{"dim", n.i("dim")}, {"start", n.i("start")}, {"end", n.i("end")}, {"step", n.i("step")}}));
}

void selectBackwardGrad(GradContext& c) {
  c.setGrad(0, c.op("select", {c.grad()}, {{"dim", c.node().i("dim")}, {"index", c.node().i("index")}}));
}

void padBackwardGrad(GradContext& c) {
  c.setGrad(0, c.op("pad", {c.grad()}, {{"pads", c.node().is("pads")}, {"mode", c.node().s("mode")}, {"value", 0.0}}));
}

void indexAddGrad(GradContext& c) {
  c.setGrad(0, c.grad());
  if (c.needs(2)) c.setGrad(2, c.op("index", {c.grad(), c.in(1)}, {{"dim", c.node().i("dim")}}));
}

/// src's gradient is gather(g); where src is larger than the index, its extra
/// elements were not used: zeros (padded at the high end of each dim).
void scatterAddGrad(GradContext& c) {
  c.setGrad(0, c.grad());
  if (!c.needs(2)) return;
  Value* g = c.op("gather", {c.grad(), c.in(1)}, {{"dim", c.node().i("dim")}});
  const Shape &have = g->shape(), &want = c.in(2)->shape();
  if (have != want) {
    Ints pads;
    for (size_t i = have.size(); i-- > 0;) pads.insert(pads.end(), {0, want[i] - have[i]});
    g = c.op("pad", {g}, {{"pads", pads}, {"mode", std::string("constant")}, {"value", 0.0}});
  }
  c.setGrad(2, g);
}

}  // namespace

void registerShapeGrads(OpTable& t) {
  const int64_t kEnd = std::numeric_limits<int64_t>::max();
  t.add({"slice_backward",
         "zeros of input_shape with g written to [start:end:step] along dim",
         1,
         1,
         0,
         {reqAttr("input_shape", AttrKind::Ints), reqAttr("dim", AttrKind::Int), optAttr("start", int64_t{0}),
          optAttr("end", kEnd), optAttr("step", int64_t{1})},
         inferSliceBackward,
         moveCost});
  t.add({"select_backward",
         "zeros of input_shape with g written at index along dim",
         1,
         1,
         0,
         {reqAttr("input_shape", AttrKind::Ints), reqAttr("dim", AttrKind::Int), reqAttr("index", AttrKind::Int)},
         inferSelectBackward,
         moveCost});
  t.add({"pad_backward",
         "gradient of pad: sums the gradient of every copy back onto input_shape",
         1,
         1,
         0,
         {reqAttr("input_shape", AttrKind::Ints), reqAttr("pads", AttrKind::Ints),
          optAttr("mode", std::string("constant"))},
         inferPadBackward,
         accumulateCost});
  t.add({"index_add",
         "base plus src added at index along dim (adjoint of index; duplicates accumulate)",
         3,
         3,
         0,
         {reqAttr("dim", AttrKind::Int)},
         inferIndexAdd,
         accumulateCost});
  t.add({"scatter_add",
         "torch.scatter_add: base plus src added at index along dim (adjoint of gather)",
         3,
         3,
         0,
         {reqAttr("dim", AttrKind::Int)},
         inferScatterAdd,
         accumulateCost});
  t.add({"scatter_reduce",
         "torch.scatter_reduce with reduce prod, amax or amin: src combined into base at index along dim "
         "(include_self: base takes part; otherwise the scattered positions hold only src's result)",
         3,
         3,
         0,
         {reqAttr("dim", AttrKind::Int), reqAttr("reduce", AttrKind::String), optAttr("include_self", int64_t{1})},
         inferScatterReduce,
         accumulateCost});

  t.setGrad("reshape", reshapeGrad);
  t.setGrad("permute", permuteGrad);
  t.setGrad("expand", expandGrad);
  t.setGrad("slice", sliceGrad);
  t.setGrad("select", selectGrad);
  t.setGrad("cat", catGrad);
  t.setGrad("split", splitGrad);
  t.setGrad("roll", rollGrad);
  t.setGrad("flip", flipGrad);
  t.setGrad("repeat", repeatGrad);
  t.setGrad("pad", padGrad);
  t.setGrad("index", indexGrad);
  t.setGrad("gather", gatherGrad);
  t.setGrad("triu", triangularGrad);
  t.setGrad("tril", triangularGrad);
  t.setNoGrad("detach", "torch.Tensor.detach: the value without its gradient, by definition");
  t.setNoGrad("full", "source op: no tensor inputs");
  t.setNoGrad("arange", "source op: no tensor inputs");

  t.setGrad("slice_backward", sliceBackwardGrad);
  t.setGrad("select_backward", selectBackwardGrad);
  t.setGrad("pad_backward", padBackwardGrad);
  t.setGrad("index_add", indexAddGrad);
  t.setGrad("scatter_add", scatterAddGrad);
  t.setGrad("scatter_reduce", scatterReduceGrad);
}

}  // namespace kiln
