// fx export of the shape family (core/ops/shape*.cpp): layout ops, the
// source ops full / arange, and their backward ops. Shapes are written as
// the resolved output shapes Kiln inferred (no -1 left for aten to guess),
// slices with Kiln's normalized bounds, and index tensors converted to
// int64 where aten insists on it. pad in the reflect / replicate / circular
// modes, and every pad_backward but the constant one, use Kiln's own
// per-axis coordinate map (backend/cpu/kernels_shape_grad.cpp) as an index
// buffer: index_select for the forward, index_add for the adjoint, which is
// exactly what Kiln's kernels compute, on any rank.
#include <algorithm>

#include "core/export/fx_python_ops.h"
#include "core/ops/op_helpers.h"

namespace kiln::fx {
namespace {

std::vector<int64_t> shapeOf(const Value* v) {
  return {v->shape().begin(), v->shape().end()};
}

/// An index operand as int64 (aten's gather/scatter/index ops want it).
std::string longIndex(Emitter& e, const Node& n, size_t i) {
  return e.cast(e.in(n, i), n.input(i)->dtype(), DType::I64);
}

void emitReshape(Emitter& e, const Node& n) {
  e.setOut(n, 0, e.call("aten.reshape.default", {e.in(n, 0), pyInts(shapeOf(n.output()))}));
}

void emitPermute(Emitter& e, const Node& n) {
  e.setOut(n, 0, e.call("aten.permute.default", {e.in(n, 0), pyInts(n.is("dims"))}));
}

void emitExpand(Emitter& e, const Node& n) {
  e.setOut(n, 0, e.call("aten.expand.default", {e.in(n, 0), pyInts(shapeOf(n.output()))}));
}

int64_t axisOf(const Node& n, int64_t rank) {
  return normalizeAxis(n.i("dim"), rank);
}

void emitSlice(Emitter& e, const Node& n) {
  const int64_t axis = axisOf(n, n.input(0)->type().rank());
  const SliceBounds b = normalizeSlice(n.input(0)->shape()[axis], n.i("start"), n.i("end"), n.i("step"));
  e.setOut(n, 0, e.call("aten.slice.Tensor", {e.in(n, 0), pyInt(axis), pyInt(b.start), pyInt(b.end), pyInt(b.step)}));
}

void emitSelect(Emitter& e, const Node& n) {
  e.setOut(n, 0, e.call("aten.select.int", {e.in(n, 0), pyInt(n.i("dim")), pyInt(n.i("index"))}));
}

void emitCat(Emitter& e, const Node& n) {
  std::string list = "[";
  for (size_t i = 0; i < n.numInputs(); ++i) list += (i ? ", " : "") + e.in(n, i);
  e.setOut(n, 0, e.call("aten.cat.default", {list + "]", pyInt(n.i("dim"))}));
}

void emitSplit(Emitter& e, const Node& n) {
  std::string parts = e.call("aten.split_with_sizes.default", {e.in(n, 0), pyInts(n.is("sizes")), pyInt(n.i("dim"))});
  for (size_t i = 0; i < n.numOutputs(); ++i) e.setOut(n, i, e.item(parts, static_cast<int64_t>(i)));
}

void emitRoll(Emitter& e, const Node& n) {
  if (n.is("shifts").empty()) return e.setOut(n, 0, e.in(n, 0));  // nothing to roll
  e.setOut(n, 0, e.call("aten.roll.default", {e.in(n, 0), pyInts(n.is("shifts")), pyInts(n.is("dims"))}));
}

void emitFlip(Emitter& e, const Node& n) {
  e.setOut(n, 0, e.call("aten.flip.default", {e.in(n, 0), pyInts(n.is("dims"))}));
}

void emitRepeat(Emitter& e, const Node& n) {
  e.setOut(n, 0, e.call("aten.repeat.default", {e.in(n, 0), pyInts(n.is("repeats"))}));
}

void emitTriangular(Emitter& e, const Node& n) {
  const char* target = n.is(Op::triu) ? "aten.triu.default" : "aten.tril.default";
  e.setOut(n, 0, e.call(target, {e.in(n, 0), pyInt(n.i("diagonal"))}));
}

/// x[:, ..., idx] along dim (negative indices count from the end, as aten.index does).
void emitIndex(Emitter& e, const Node& n) {
  const int64_t axis = axisOf(n, n.input(0)->type().rank());
  std::string list = "[";
  for (int64_t d = 0; d < axis; ++d) list += "None, ";
  e.setOut(n, 0, e.call("aten.index.Tensor", {e.in(n, 0), list + longIndex(e, n, 1) + "]"}));
}

void emitGather(Emitter& e, const Node& n) {
  e.setOut(n, 0, e.call("aten.gather.default", {e.in(n, 0), pyInt(n.i("dim")), longIndex(e, n, 1)}));
}

void emitFull(Emitter& e, const Node& n) {
  const DType t = n.dt("dtype");
  e.setOut(n, 0,
           e.call("aten.full.default", {pyInts(n.is("shape")), pyScalar(n.f("value"), t)},
                  {"dtype=" + pyDType(t), "device=device"}));
}

bool integral(double v) {
  return v == static_cast<double>(static_cast<int64_t>(v));
}

void emitArange(Emitter& e, const Node& n) {
  const DType t = n.dt("dtype");
  const double start = n.f("start"), end = n.f("end"), step = n.f("step");
  // Integer ranges with integer bounds as ints, so aten counts exactly as Kiln does.
  auto lit = [&](double v) {
    return !isFloating(t) && integral(start) && integral(end) && integral(step) ? pyInt(static_cast<int64_t>(v))
                                                                                : pyFloat(v);
  };
  e.setOut(
      n, 0,
      e.call("aten.arange.start_step", {lit(start), lit(end), lit(step)}, {"dtype=" + pyDType(t), "device=device"}));
}

// ---- backward ops and their adjoints ----------------------------------------------

void emitSliceBackward(Emitter& e, const Node& n) {
  const std::vector<int64_t>& in = n.is("input_shape");
  const int64_t axis = axisOf(n, static_cast<int64_t>(in.size()));
  const SliceBounds b = normalizeSlice(in[axis], n.i("start"), n.i("end"), n.i("step"));
  e.setOut(n, 0,
           e.call("aten.slice_backward.default",
                  {e.in(n, 0), pyInts(in), pyInt(axis), pyInt(b.start), pyInt(b.end), pyInt(b.step)}));
}

void emitSelectBackward(Emitter& e, const Node& n) {
  e.setOut(n, 0,
           e.call("aten.select_backward.default",
                  {e.in(n, 0), pyInts(n.is("input_shape")), pyInt(n.i("dim")), pyInt(n.i("index"))}));
}

/// base + src at the (flattened, wrapped) indices along dim.
void emitIndexAdd(Emitter& e, const Node& n) {
  const Shape& base = n.input(0)->shape();
  const int64_t axis = axisOf(n, static_cast<int64_t>(base.size()));
  const int64_t count = n.input(1)->type().numel();
  std::string idx = e.call("aten.reshape.default", {longIndex(e, n, 1), pyInts({count})});
  idx = e.call("aten.remainder.Scalar", {idx, pyInt(base[axis])});  // -1 -> size - 1, as Kiln's kernel
  std::vector<int64_t> src_shape(base.begin(), base.end());
  src_shape[axis] = count;
  std::string src = e.call("aten.reshape.default", {e.in(n, 2), pyInts(src_shape)});
  e.setOut(n, 0, e.call("aten.index_add.default", {e.in(n, 0), pyInt(axis), idx, src}));
}

void emitScatterAdd(Emitter& e, const Node& n) {
  e.setOut(n, 0, e.call("aten.scatter_add.default", {e.in(n, 0), pyInt(n.i("dim")), longIndex(e, n, 1), e.in(n, 2)}));
}

/// scatter_reduce: aten.scatter_reduce.two with the same reduce and include_self.
void emitScatterReduce(Emitter& e, const Node& n) {
  e.setOut(n, 0,
           e.call("aten.scatter_reduce.two",
                  {e.in(n, 0), pyInt(n.i("dim")), longIndex(e, n, 1), e.in(n, 2), pyStr(n.s("reduce"))},
                  {"include_self=" + pyBool(n.i("include_self") != 0)}));
}

// ---- pad ----------------------------------------------------------------------------

/// The input coordinate each output coordinate of one padded axis reads:
/// Kiln's padMap (kernels_shape_grad.cpp), with its checks.
std::vector<int64_t> padMap(const Node& n, const std::string& mode, int64_t size, int64_t lo, int64_t hi) {
  if (size == 0) refuse(n, mode + " padding needs a non-empty dimension");
  if (mode == "reflect" && (lo >= size || hi >= size))
    refuse(n, "reflect padding must be smaller than the dimension size " + std::to_string(size));
  if (mode == "circular" && (lo > size || hi > size))
    refuse(n, "circular padding must be at most the dimension size " + std::to_string(size));
  std::vector<int64_t> map;
  for (int64_t i = 0, len = size + lo + hi; i < len; ++i) {
    int64_t j = i - lo;
    if (mode == "reflect")
      j = j < 0 ? -j : (j >= size ? 2 * (size - 1) - j : j);
    else if (mode == "replicate")
      j = std::clamp<int64_t>(j, 0, size - 1);
    else
      j = ((j % size) + size) % size;  // circular
    map.push_back(j);
  }
  return map;
}

struct PadAxis {
  int64_t axis, lo, hi;
};

/// The padded axes: pads run from the last dim backwards, (lo, hi) per dim.
std::vector<PadAxis> padAxes(const std::vector<int64_t>& pads, int64_t rank) {
  std::vector<PadAxis> axes;
  for (size_t i = 0; i + 1 < pads.size(); i += 2)
    if (pads[i] || pads[i + 1]) axes.push_back({rank - 1 - static_cast<int64_t>(i / 2), pads[i], pads[i + 1]});
  return axes;
}

void checkMode(const Node& n, const std::string& mode) {
  if (mode != "constant" && mode != "reflect" && mode != "replicate" && mode != "circular")
    refuse(n, "unknown pad mode '" + mode + "'");
}

void emitPad(Emitter& e, const Node& n) {
  const std::string& mode = n.s("mode");
  checkMode(n, mode);
  if (mode == "constant")
    return e.setOut(n, 0,
                    e.call("aten.constant_pad_nd.default",
                           {e.in(n, 0), pyInts(n.is("pads")), pyScalar(n.f("value"), n.input(0)->dtype())}));
  const Shape& shape = n.input(0)->shape();
  std::string x = e.in(n, 0);
  for (const PadAxis& a : padAxes(n.is("pads"), static_cast<int64_t>(shape.size())))
    x = e.call("aten.index_select.default",
               {x, pyInt(a.axis), e.intsConst(padMap(n, mode, shape[a.axis], a.lo, a.hi))});
  e.setOut(n, 0, x);
}

/// The adjoint of pad: a crop for constant padding, else the sum of every
/// copy back onto its source coordinate, one axis at a time.
void emitPadBackward(Emitter& e, const Node& n) {
  const std::string& mode = n.s("mode");
  checkMode(n, mode);
  std::vector<int64_t> pads = n.is("pads");
  if (mode == "constant") {
    for (int64_t& p : pads) p = -p;
    return e.setOut(n, 0, e.call("aten.constant_pad_nd.default", {e.in(n, 0), pyInts(pads), "0"}));
  }
  const std::vector<int64_t>& in = n.is("input_shape");
  std::vector<int64_t> cur = shapeOf(n.input(0));
  std::string g = e.in(n, 0);
  for (const PadAxis& a : padAxes(pads, static_cast<int64_t>(in.size()))) {
    cur[a.axis] = in[a.axis];
    std::string zeros = e.call("aten.new_zeros.default", {g, pyInts(cur)});
    g = e.call("aten.index_add.default",
               {zeros, pyInt(a.axis), e.intsConst(padMap(n, mode, in[a.axis], a.lo, a.hi)), g});
  }
  e.setOut(n, 0, g);
}

}  // namespace

void addShapeEmitters(EmitTable& t) {
  t["reshape"] = emitReshape;
  t["permute"] = emitPermute;
  t["expand"] = emitExpand;
  t["slice"] = emitSlice;
  t["select"] = emitSelect;
  t["cat"] = emitCat;
  t["split"] = emitSplit;
  t["roll"] = emitRoll;
  t["flip"] = emitFlip;
  t["repeat"] = emitRepeat;
  t["pad"] = emitPad;
  t["index"] = emitIndex;
  t["gather"] = emitGather;
  t["triu"] = emitTriangular;
  t["tril"] = emitTriangular;
  t["full"] = emitFull;
  t["arange"] = emitArange;
  t["slice_backward"] = emitSliceBackward;
  t["select_backward"] = emitSelectBackward;
  t["pad_backward"] = emitPadBackward;
  t["index_add"] = emitIndexAdd;
  t["scatter_add"] = emitScatterAdd;
  t["scatter_reduce"] = emitScatterReduce;
}

}  // namespace kiln::fx
