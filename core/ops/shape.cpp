// Layout and shape ops: reshape, permute, expand, slice, select, cat, split,
// roll, flip, repeat, pad, index/gather, triangular masks, and the source ops
// `full` and `arange`. Importers resolve PyTorch's -1 sizes and negative
// indices into these ops' attributes; kernels rely on normalizeSlice and the
// other helpers in op_helpers.h for the same index arithmetic.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/ops/op_helpers.h"

namespace kiln {
namespace {

std::vector<TensorType> inferReshape(const Node& n) {
  const TensorType& in = n.input(0)->type();
  return {{in.dtype, resolveReshape(n, in.shape, n.is("shape"))}};
}

std::vector<TensorType> inferPermute(const Node& n) {
  const TensorType& in = n.input(0)->type();
  const auto& dims = n.is("dims");
  if (static_cast<int64_t>(dims.size()) != in.rank())
    opFail(n, "dims " + shapeStr(dims) + " do not match rank " + std::to_string(in.rank()));
  std::vector<bool> seen(dims.size());
  Shape out;
  for (int64_t d : dims) {
    int64_t a = normalizeAxis(d, in.rank());
    if (seen[a]) opFail(n, "dims " + shapeStr(dims) + " is not a permutation");
    seen[a] = true;
    out.push_back(in.shape[a]);
  }
  return {{in.dtype, out}};
}

std::vector<TensorType> inferExpand(const Node& n) {
  const TensorType& in = n.input(0)->type();
  return {{in.dtype, resolveExpand(n, in.shape, n.is("shape"))}};
}

/// The dim attribute of an op that needs at least one dim (slice, select,
/// cat, split, index): PyTorch rejects 0-d inputs there, and so do we.
int64_t dimOf(const Node& n, const TensorType& t) {
  if (t.rank() == 0) opFail(n, "cannot be applied to a 0-d tensor");
  return normalizeAxis(n.i("dim"), t.rank());
}

std::vector<TensorType> inferSlice(const Node& n) {
  TensorType t = n.input(0)->type();
  int64_t axis = dimOf(n, t);
  if (n.i("step") <= 0) opFail(n, "slice step must be positive");
  t.shape[axis] = normalizeSlice(t.shape[axis], n.i("start"), n.i("end"), n.i("step")).length;
  return {t};
}

std::vector<TensorType> inferSelect(const Node& n) {
  TensorType t = n.input(0)->type();
  int64_t axis = dimOf(n, t);
  int64_t idx = n.i("index"), size = t.shape[axis];
  if (idx < -size || idx >= size)
    opFail(n, "index " + std::to_string(idx) + " is out of range for size " + std::to_string(size));
  t.shape.erase(t.shape.begin() + axis);
  return {t};
}

std::vector<TensorType> inferCat(const Node& n) {
  TensorType t = n.input(0)->type();
  int64_t axis = dimOf(n, t);
  t.shape[axis] = 0;
  for (Value* v : n.inputs()) {
    const TensorType& o = v->type();
    if (o.rank() != t.rank()) opFail(n, "inputs have different ranks: " + n.input(0)->type().str() + ", " + o.str());
    for (int64_t i = 0; i < t.rank(); ++i)
      if (i != axis && o.shape[i] != t.shape[i])
        opFail(n, "input shapes differ outside dim " + std::to_string(axis) + ": " + n.input(0)->type().str() +
                      ", " + o.str());
    t.dtype = promoteTypes(t.dtype, o.dtype);
    t.shape[axis] += o.shape[axis];
  }
  return {t};
}

std::vector<TensorType> inferSplit(const Node& n) {
  const TensorType& in = n.input(0)->type();
  int64_t axis = dimOf(n, in);
  const auto& sizes = n.is("sizes");
  int64_t total = 0;
  std::vector<TensorType> outs;
  for (int64_t s : sizes) {
    if (s < 0) opFail(n, "negative split size");
    total += s;
    TensorType o = in;
    o.shape[axis] = s;
    outs.push_back(o);
  }
  if (total != in.shape[axis])
    opFail(n, "split sizes " + shapeStr(sizes) + " do not add up to " + std::to_string(in.shape[axis]));
  return outs;
}

std::vector<TensorType> inferRoll(const Node& n) {
  const TensorType& in = n.input(0)->type();
  const auto& shifts = n.is("shifts");
  const auto& dims = n.is("dims");
  if (shifts.size() != dims.size() && !(dims.empty() && shifts.size() == 1))
    opFail(n, "shifts and dims must have the same length");
  for (int64_t d : dims) normalizeAxis(d, in.rank());
  return {in};
}

std::vector<TensorType> inferFlip(const Node& n) {
  for (int64_t d : n.is("dims")) normalizeAxis(d, n.input(0)->type().rank());
  return {n.input(0)->type()};
}

std::vector<TensorType> inferRepeat(const Node& n) {
  const TensorType& in = n.input(0)->type();
  const auto& reps = n.is("repeats");
  if (reps.size() < in.shape.size()) opFail(n, "repeats must have at least as many entries as the input has dims");
  Shape out(reps.size());
  size_t off = reps.size() - in.shape.size();
  for (size_t i = 0; i < reps.size(); ++i) out[i] = reps[i] * (i < off ? 1 : in.shape[i - off]);
  return {{in.dtype, out}};
}

std::vector<TensorType> inferPad(const Node& n) {
  TensorType t = n.input(0)->type();
  const auto& pads = n.is("pads");
  if (pads.size() % 2 || static_cast<int64_t>(pads.size() / 2) > t.rank())
    opFail(n, "pads " + shapeStr(pads) + " must be pairs for at most rank dims");
  const std::string& mode = n.s("mode");
  if (mode != "constant" && mode != "reflect" && mode != "replicate" && mode != "circular")
    opFail(n, "unknown pad mode '" + mode + "'");
  // pads run from the last dim backwards: (last_lo, last_hi, prev_lo, prev_hi, ...)
  for (size_t i = 0; i < pads.size() / 2; ++i) {
    int64_t axis = t.rank() - 1 - static_cast<int64_t>(i);
    t.shape[axis] += pads[2 * i] + pads[2 * i + 1];
    if (t.shape[axis] < 0) opFail(n, "negative padding removes more than the dimension holds");
  }
  return {t};
}

std::vector<TensorType> inferIndex(const Node& n) {
  // out = x.shape[:dim] + idx.shape + x.shape[dim+1:]  (numpy.take along dim)
  const TensorType& x = n.input(0)->type();
  const TensorType& idx = n.input(1)->type();
  if (!isIntegral(idx.dtype)) opFail(n, "index tensor must be an integer type, got " + idx.str());
  int64_t axis = dimOf(n, x);
  Shape out(x.shape.begin(), x.shape.begin() + axis);
  out.insert(out.end(), idx.shape.begin(), idx.shape.end());
  out.insert(out.end(), x.shape.begin() + axis + 1, x.shape.end());
  return {{x.dtype, out}};
}

std::vector<TensorType> inferGather(const Node& n) {
  const TensorType& x = n.input(0)->type();
  const TensorType& idx = n.input(1)->type();
  if (!isIntegral(idx.dtype)) opFail(n, "index tensor must be an integer type, got " + idx.str());
  if (idx.rank() != x.rank()) opFail(n, "index must have the same rank as the input");
  normalizeAxis(n.i("dim"), x.rank());
  return {{x.dtype, idx.shape}};
}

std::vector<TensorType> inferTriangular(const Node& n) {
  if (n.input(0)->type().rank() < 2) opFail(n, "needs at least 2 dims");
  return {n.input(0)->type()};
}

std::vector<TensorType> inferFull(const Node& n) {
  for (int64_t d : n.is("shape"))
    if (d < 0) opFail(n, "negative dimension in shape");
  return {{n.dt("dtype"), n.is("shape")}};
}

std::vector<TensorType> inferArange(const Node& n) {
  double start = n.f("start"), end = n.f("end"), step = n.f("step");
  if (step == 0 || !std::isfinite(start) || !std::isfinite(end)) opFail(n, "invalid range");
  int64_t len = static_cast<int64_t>(std::ceil((end - start) / step));
  return {{n.dt("dtype"), {std::max<int64_t>(len, 0)}}};
}

Cost moveCost(const Node& n) { return {0, ioBytes(n)}; }

void addView(OpTable& t, const char* name, const char* summary, std::vector<AttrSpec> attrs, InferFn infer,
             int min_in = 1, int max_in = 1) {
  t.add({name, summary, min_in, max_in, kView, std::move(attrs), infer, moveCost});
}

}  // namespace

void registerShapeOps(OpTable& t) {
  const int64_t kEnd = std::numeric_limits<int64_t>::max();
  addView(t, "reshape", "same data, new shape", {reqAttr("shape", AttrKind::Ints)}, inferReshape);
  addView(t, "detach", "x itself, through which no gradient flows (torch.Tensor.detach)", {}, inferSameAsInput0);
  addView(t, "permute", "reorder dims", {reqAttr("dims", AttrKind::Ints)}, inferPermute);
  addView(t, "expand", "broadcast to shape (-1 keeps a dim)", {reqAttr("shape", AttrKind::Ints)}, inferExpand);
  addView(t, "slice", "x[start:end:step] along dim",
          {reqAttr("dim", AttrKind::Int), optAttr("start", int64_t{0}), optAttr("end", kEnd),
           optAttr("step", int64_t{1})},
          inferSlice);
  addView(t, "select", "x[index] along dim (removes the dim)",
          {reqAttr("dim", AttrKind::Int), reqAttr("index", AttrKind::Int)}, inferSelect);
  addView(t, "cat", "concatenate along dim", {reqAttr("dim", AttrKind::Int)}, inferCat, 1, -1);
  t.add({"split", "split along dim into pieces of `sizes`", 1, 1, kView,
         {reqAttr("dim", AttrKind::Int), reqAttr("sizes", AttrKind::Ints)}, inferSplit, moveCost});
  addView(t, "roll", "rotate along dims (dims=[] rolls the flattened tensor)",
          {reqAttr("shifts", AttrKind::Ints), optAttr("dims", std::vector<int64_t>{})}, inferRoll);
  addView(t, "flip", "reverse along dims", {reqAttr("dims", AttrKind::Ints)}, inferFlip);
  addView(t, "repeat", "tile like Tensor.repeat", {reqAttr("repeats", AttrKind::Ints)}, inferRepeat);
  addView(t, "pad", "F.pad: pads from the last dim backwards; constant/reflect/replicate/circular",
          {reqAttr("pads", AttrKind::Ints), optAttr("mode", std::string("constant")), optAttr("value", 0.0)},
          inferPad);
  addView(t, "index", "take along dim: out = x.shape[:dim] + idx.shape + x.shape[dim+1:]",
          {reqAttr("dim", AttrKind::Int)}, inferIndex, 2, 2);
  addView(t, "gather", "torch.gather along dim", {reqAttr("dim", AttrKind::Int)}, inferGather, 2, 2);
  addView(t, "triu", "zero below the diagonal (last two dims)", {optAttr("diagonal", int64_t{0})}, inferTriangular);
  addView(t, "tril", "zero above the diagonal (last two dims)", {optAttr("diagonal", int64_t{0})}, inferTriangular);
  t.add({"full", "tensor of shape filled with value", 0, 0, kSource,
         {reqAttr("shape", AttrKind::Ints), reqAttr("value", AttrKind::Float), optAttr("dtype", DType::F32)}, inferFull,
         moveCost});
  t.add({"arange", "start, start+step, ... < end", 0, 0, kSource,
         {optAttr("start", 0.0), reqAttr("end", AttrKind::Float), optAttr("step", 1.0), optAttr("dtype", DType::I64)},
         inferArange, moveCost});
}

}  // namespace kiln
