// aten layout overloads -> Kiln shape ops. PyTorch's views are read by their
// meaning (Kiln values are contiguous): view/_reshape_alias/_unsafe_view are
// reshapes, t/transpose are permutes, squeeze/unsqueeze/flatten reshape,
// slicing bounds are normalized here so Kiln attributes are explicit, and the
// scatter ops that functionalization produces become slices + cat.
#include <algorithm>
#include <limits>

#include "core/import/decompositions/index.h"
#include "core/import/fx/fx_lowering.h"
#include "core/ops/op_helpers.h"
#include "core/result.h"

namespace kiln::fx {
namespace {

/// `spec` (one -1 allowed) resolved against the element count of `x`.
Shape resolveSize(Value* x, Shape spec) {
  int64_t numel = x->type().numel(), known = 1;
  int64_t infer_at = -1;
  for (size_t i = 0; i < spec.size(); ++i) {
    if (spec[i] == -1) infer_at = static_cast<int64_t>(i);
    else known *= spec[i];
  }
  if (infer_at >= 0) {
    if (known == 0 || numel % known != 0) fail("cannot reshape " + x->type().str() + " to " + shapeStr(spec));
    spec[infer_at] = numel / known;
  }
  if (numelOf(spec) != numel) fail("cannot reshape " + x->type().str() + " to " + shapeStr(spec));
  return spec;
}

/// view / reshape / _reshape_alias / _unsafe_view: a reshape to `size` (or `shape`).
FxValue lowerView(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  return FxValue::of(cx.reshape(x, resolveSize(x, a.sizes(a.has("size") ? "size" : "shape"))));
}

/// as_strided is only accepted where it is a reshape: no offset and strides
/// contiguous for `size` apart from size-1 dims (1.13's adaptive_avg_pool2d
/// to 1x1). Kiln does not know PyTorch's strides, so anything else is refused.
FxValue lowerAsStrided(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  Shape size = a.sizes("size");
  auto stride = a.ints("stride");
  auto offset = a.optInt("storage_offset");
  bool contiguous = stride.size() == size.size() && (!offset || *offset == 0);
  int64_t expect = 1;
  for (size_t i = size.size(); contiguous && i-- > 0;) {
    if (size[i] == -1) contiguous = false;
    else if (size[i] != 1 && stride[i] != expect) contiguous = false;
    else expect *= size[i];
  }
  if (!contiguous || numelOf(size) != x->type().numel())
    fail("as_strided to size " + shapeStr(size) + " stride " + shapeStr(stride) +
         " is not a plain reshape of a contiguous tensor; Kiln supports only that form");
  return FxValue::of(cx.reshape(x, size));
}

FxValue lowerExpand(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  Shape spec = a.sizes("size", /*expand=*/true);
  const Shape& in = x->shape();
  if (spec.size() < in.size()) a.fail("size", "cannot expand " + x->type().str() + " to fewer dims " + shapeStr(spec));
  size_t off = spec.size() - in.size();
  for (size_t i = 0; i < spec.size(); ++i) {
    if (spec[i] != -1) continue;
    if (i < off) a.fail("size", "-1 is not allowed for a new leading dim in " + shapeStr(spec));
    spec[i] = in[i - off];
  }
  return FxValue::of(cx.expand(x, spec));
}

/// A permute; 2-D transposes are remembered so addmm/mm can become `linear`.
Value* permuteTracked(Lowering& cx, Value* x, std::vector<int64_t> dims) {
  Value* y = cx.permute(x, dims);
  if (y != x && x->type().rank() == 2) cx.transpose_of[y] = x;
  return y;
}

FxValue lowerPermute(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  auto dims = a.ints("dims");
  if (static_cast<int64_t>(dims.size()) != x->type().rank())
    a.fail("dims", shapeStr(dims) + " does not match rank " + std::to_string(x->type().rank()));
  for (int64_t& d : dims) d = normDim(d, x->type().rank());
  return FxValue::of(permuteTracked(cx, x, dims));
}

std::vector<int64_t> swapped(int64_t rank, int64_t d0, int64_t d1) {
  std::vector<int64_t> dims(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) dims[i] = i;
  if (rank > 0) std::swap(dims[normDim(d0, rank)], dims[normDim(d1, rank)]);
  return dims;
}

FxValue lowerTranspose(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  return FxValue::of(permuteTracked(cx, x, swapped(x->type().rank(), a.integer("dim0"), a.integer("dim1"))));
}

/// t(x): transpose of a 2-D tensor; 0-D and 1-D tensors are returned as is.
FxValue lowerT(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  if (x->type().rank() > 2) a.fail("self", "t() expects at most 2 dims, got " + x->type().str());
  return FxValue::of(x->type().rank() < 2 ? x : permuteTracked(cx, x, {1, 0}));
}

FxValue lowerUnsqueeze(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  Shape s = x->shape();
  int64_t d = normDim(a.integer("dim"), x->type().rank() + 1);
  s.insert(s.begin() + d, 1);
  return FxValue::of(cx.reshape(x, s));
}

/// squeeze.default (all size-1 dims), squeeze.dim, squeeze.dims.
FxValue lowerSqueeze(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  const Shape& in = x->shape();
  std::vector<bool> drop(in.size(), false);
  if (a.has("dim")) {
    for (int64_t d : a.ints("dim"))
      if (!in.empty()) drop[normDim(d, x->type().rank())] = true;
  } else {
    drop.assign(in.size(), true);
  }
  Shape out;
  for (size_t i = 0; i < in.size(); ++i)
    if (!(drop[i] && in[i] == 1)) out.push_back(in[i]);
  return FxValue::of(cx.reshape(x, out));
}

FxValue lowerFlatten(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  int64_t rank = x->type().rank();
  if (rank == 0) return FxValue::of(cx.reshape(x, {1}));
  int64_t s = normDim(a.integer("start_dim"), rank), e = normDim(a.integer("end_dim"), rank);
  if (s > e) a.fail("start_dim", "start_dim comes after end_dim");
  Shape out(x->shape().begin(), x->shape().begin() + s);
  int64_t merged = 1;
  for (int64_t i = s; i <= e; ++i) merged *= x->shape()[i];
  out.push_back(merged);
  out.insert(out.end(), x->shape().begin() + e + 1, x->shape().end());
  return FxValue::of(cx.reshape(x, out));
}

/// Python slice bounds of one dim, normalized (start/end None = whole dim).
SliceBounds sliceBounds(NodeArgs& a, Value* x, int64_t dim) {
  int64_t step = a.integer("step");
  if (step <= 0) a.fail("step", "slice step must be positive, got " + std::to_string(step));
  int64_t size = x->shape()[dim];
  // Clamp first so that adding `size` to a negative bound cannot overflow.
  auto clampBound = [&](int64_t v) { return std::clamp<int64_t>(v, -kMaxElements - 1, kMaxElements + 1); };
  int64_t start = clampBound(a.optAnyInt("start").value_or(0));
  int64_t end = clampBound(a.optAnyInt("end").value_or(std::numeric_limits<int64_t>::max()));
  return normalizeSlice(size, start, end, step);
}

FxValue lowerSlice(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  if (x->type().rank() == 0) a.fail("self", "cannot slice a 0-d tensor");
  int64_t dim = normDim(a.integer("dim"), x->type().rank());
  SliceBounds b = sliceBounds(a, x, dim);
  if (b.length == x->shape()[dim]) return FxValue::of(x);
  return FxValue::of(cx.emit("slice", {x}, {{"dim", dim}, {"start", b.start}, {"end", b.end}, {"step", b.step}}));
}

/// slice_scatter(self, src, dim, start, end, step): self with self[slice] = src,
/// built as cat(self[:start], src, self[end:]) (step 1 only).
FxValue lowerSliceScatter(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  Value* src = a.tensor("src");
  if (x->type().rank() == 0) a.fail("self", "cannot slice a 0-d tensor");
  int64_t dim = normDim(a.integer("dim"), x->type().rank());
  SliceBounds b = sliceBounds(a, x, dim);
  if (b.step != 1) a.fail("step", "slice_scatter with step " + std::to_string(b.step) + " is not supported");
  Shape expect = x->shape();
  expect[dim] = b.length;
  if (src->shape() != expect)
    a.fail("src", src->type().str() + " does not fit the slice " + shapeStr(expect) + " of " + x->type().str());
  int64_t size = x->shape()[dim], start = b.length ? b.start : std::min(b.start, size);
  std::vector<Value*> parts;
  auto piece = [&](int64_t s, int64_t e) {
    if (e > s) parts.push_back(cx.emit("slice", {x}, {{"dim", dim}, {"start", s}, {"end", e}, {"step", int64_t{1}}}));
  };
  piece(0, start);
  if (b.length) parts.push_back(cx.cast(src, x->dtype()));
  piece(start + b.length, size);
  if (parts.size() == 1) return FxValue::of(parts[0]);
  return FxValue::of(cx.emit("cat", parts, {{"dim", dim}}));
}

FxValue lowerSelect(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  if (x->type().rank() == 0) a.fail("self", "cannot select from a 0-d tensor");
  int64_t dim = normDim(a.integer("dim"), x->type().rank());
  int64_t size = x->shape()[dim], index = a.integer("index");
  if (index < -size || index >= size)
    a.fail("index", std::to_string(index) + " is out of range for size " + std::to_string(size));
  if (index < 0) index += size;
  return FxValue::of(cx.emit("select", {x}, {{"dim", dim}, {"index", index}}));
}

/// select_scatter(self, src, dim, index) = slice_scatter with src unsqueezed.
FxValue lowerSelectScatter(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  Value* src = a.tensor("src");
  if (x->type().rank() == 0) a.fail("self", "cannot select from a 0-d tensor");
  int64_t dim = normDim(a.integer("dim"), x->type().rank());
  int64_t size = x->shape()[dim], index = a.integer("index");
  if (index < -size || index >= size)
    a.fail("index", std::to_string(index) + " is out of range for size " + std::to_string(size));
  if (index < 0) index += size;
  Shape expect = x->shape();
  expect.erase(expect.begin() + dim);
  if (src->shape() != expect) a.fail("src", src->type().str() + " does not fit " + shapeStr(expect));
  expect.insert(expect.begin() + dim, 1);
  Value* row = cx.reshape(cx.cast(src, x->dtype()), expect);
  std::vector<Value*> parts;
  if (index > 0) parts.push_back(cx.emit("slice", {x}, {{"dim", dim}, {"start", int64_t{0}}, {"end", index}}));
  parts.push_back(row);
  if (index + 1 < size) parts.push_back(cx.emit("slice", {x}, {{"dim", dim}, {"start", index + 1}, {"end", size}}));
  return FxValue::of(parts.size() == 1 ? parts[0] : cx.emit("cat", parts, {{"dim", dim}}));
}

/// cat: common dtype; legacy empty 1-D tensors ([0]) are skipped, as PyTorch does.
FxValue lowerCat(Lowering& cx, NodeArgs& a) {
  std::vector<Value*> all = a.tensors("tensors"), parts;
  if (all.empty()) a.fail("tensors", "cat needs at least one tensor");
  for (Value* v : all)
    if (!(v->type().rank() == 1 && v->shape()[0] == 0)) parts.push_back(v);
  if (parts.empty()) parts.push_back(all[0]);
  DType t = parts[0]->dtype();
  for (Value* v : all) t = promoteTypes(t, v->dtype());
  int64_t dim = normDim(a.integer("dim"), parts[0]->type().rank());
  for (Value*& v : parts) v = cx.cast(v, t);
  if (parts.size() == 1) return FxValue::of(parts[0]);
  return FxValue::of(cx.emit("cat", parts, {{"dim", dim}}));
}

FxValue lowerStack(Lowering& cx, NodeArgs& a) {
  std::vector<Value*> parts = a.tensors("tensors");
  if (parts.empty()) a.fail("tensors", "stack needs at least one tensor");
  int64_t dim = normDim(a.integer("dim"), parts[0]->type().rank() + 1);
  DType t = parts[0]->dtype();
  for (Value* v : parts) t = promoteTypes(t, v->dtype());
  for (Value*& v : parts) {
    Shape s = v->shape();
    if (dim > static_cast<int64_t>(s.size())) a.fail("tensors", "tensors of different ranks");
    s.insert(s.begin() + dim, 1);
    v = cx.reshape(cx.cast(v, t), s);
  }
  return FxValue::of(parts.size() == 1 ? parts[0] : cx.emit("cat", parts, {{"dim", dim}}));
}

/// Kiln split into pieces of `sizes` along `dim`, as an FX list.
FxValue splitInto(Lowering& cx, Value* x, int64_t dim, const std::vector<int64_t>& sizes) {
  if (sizes.size() == 1) return FxValue::tuple({FxValue::of(x)});
  Node* n = cx.emitNode("split", {x}, {{"dim", dim}, {"sizes", sizes}});
  std::vector<FxValue> items;
  for (Value* v : n->outputs()) items.push_back(FxValue::of(v));
  return FxValue::tuple(std::move(items));
}

/// Most results a split/chunk/unbind may have (keeps hostile files from
/// asking for 2^40 outputs).
constexpr int64_t kMaxPieces = int64_t{1} << 16;

/// Pieces of `chunk` elements (the last may be smaller).
std::vector<int64_t> evenPieces(int64_t size, int64_t chunk) {
  if ((size + chunk - 1) / chunk > kMaxPieces) fail("more than 65536 pieces");
  std::vector<int64_t> sizes;
  for (int64_t done = 0; done < size; done += chunk) sizes.push_back(std::min(chunk, size - done));
  if (sizes.empty()) sizes.push_back(0);
  return sizes;
}

FxValue lowerSplit(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  int64_t dim = normDim(a.integer("dim"), x->type().rank());
  int64_t chunk = a.integer("split_size");
  if (chunk <= 0) a.fail("split_size", "must be positive, got " + std::to_string(chunk));
  return splitInto(cx, x, dim, evenPieces(x->shape().empty() ? 1 : x->shape()[dim], chunk));
}

FxValue lowerSplitWithSizes(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  int64_t dim = normDim(a.integer("dim"), x->type().rank());
  return splitInto(cx, x, dim, a.ints("split_sizes"));
}

FxValue lowerChunk(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  int64_t dim = normDim(a.integer("dim"), x->type().rank());
  int64_t chunks = a.integer("chunks");
  if (chunks <= 0) a.fail("chunks", "must be positive, got " + std::to_string(chunks));
  int64_t size = x->shape().empty() ? 1 : x->shape()[dim];
  return splitInto(cx, x, dim, evenPieces(size, std::max<int64_t>(1, (size + chunks - 1) / chunks)));
}

FxValue lowerUnbind(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  if (x->type().rank() == 0) a.fail("self", "cannot unbind a 0-d tensor");
  int64_t dim = normDim(a.integer("dim"), x->type().rank());
  if (x->shape()[dim] > kMaxPieces) a.fail("self", "unbind into more than 65536 pieces");
  std::vector<FxValue> items;
  for (int64_t i = 0; i < x->shape()[dim]; ++i)
    items.push_back(FxValue::of(cx.emit("select", {x}, {{"dim", dim}, {"index", i}})));
  return FxValue::tuple(std::move(items));
}

/// index.Tensor(self, indices): one index tensor along a dim, or several
/// (advanced indexing, broadcast together); a boolean mask gives a
/// data-dependent shape.
FxValue lowerIndex(Lowering& cx, NodeArgs& a) {
  return FxValue::of(decomp::indexWith(cx, a.tensor("self"), a.optTensors("indices")));
}

/// index_put(self, indices, values, accumulate=False): x[idx] = v, x[i, j] += v, x[mask] = v.
FxValue lowerIndexPut(Lowering& cx, NodeArgs& a) {
  return FxValue::of(decomp::indexPut(cx, a.tensor("self"), a.optTensors("indices"), a.tensor("values"),
                                      a.flag("accumulate")));
}

/// scatter.src / .value / .reduce / .value_reduce, scatter_add, scatter_reduce.two.
FxValue lowerScatter(Lowering& cx, NodeArgs& a) {
  Value* src = a.has("src") ? a.tensor("src") : nullptr;
  const double value = src ? 0.0 : a.real("value");
  std::string reduce = a.kiln == "sum" ? "sum" : a.has("reduce") ? a.str("reduce") : "";
  const bool include_self = a.has("include_self") ? a.flag("include_self") : true;
  return FxValue::of(decomp::scatter(cx, a.tensor("self"), a.integer("dim"), a.tensor("index"), src, value, reduce,
                                     include_self));
}

/// take_along_dim(self, indices, dim=None).
FxValue lowerTakeAlongDim(Lowering& cx, NodeArgs& a) {
  return FxValue::of(decomp::takeAlongDim(cx, a.tensor("self"), a.tensor("indices"), a.optInt("dim")));
}

/// one_hot(self, num_classes=-1).
FxValue lowerOneHot(Lowering& cx, NodeArgs& a) {
  return FxValue::of(decomp::oneHot(cx, a.tensor("self"), a.integer("num_classes")));
}

FxValue lowerIndexSelect(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  Value* idx = a.tensor("index");
  if (idx->type().rank() > 1) a.fail("index", "must be 0-d or 1-D, got " + idx->type().str());
  int64_t dim = normDim(a.integer("dim"), x->type().rank());
  if (x->type().rank() == 0) return FxValue::of(x);
  return FxValue::of(cx.emit("index", {x, cx.reshape(idx, {idx->type().numel()})}, {{"dim", dim}}));
}

FxValue lowerGather(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  int64_t dim = normDim(a.integer("dim"), x->type().rank());
  return FxValue::of(cx.emit("gather", {x, a.tensor("index")}, {{"dim", dim}}));
}

FxValue lowerRoll(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  auto dims = a.ints("dims");
  for (int64_t& d : dims) d = normDim(d, x->type().rank());
  return FxValue::of(cx.emit("roll", {x}, {{"shifts", a.ints("shifts")}, {"dims", dims}}));
}

FxValue lowerFlip(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  auto dims = a.ints("dims");
  for (int64_t& d : dims) d = normDim(d, x->type().rank());
  return FxValue::of(dims.empty() ? x : cx.emit("flip", {x}, {{"dims", dims}}));
}

FxValue lowerRepeat(Lowering& cx, NodeArgs& a) {
  return FxValue::of(cx.emit("repeat", {a.tensor("self")}, {{"repeats", a.ints("repeats", kMaxWindow)}}));
}

/// [0]*r + [1]*r + ... for n rows: reshape -> expand -> reshape of arange(n).
Value* repeatIndex(Lowering& cx, int64_t n, int64_t r) {
  Value* rows = cx.emit("arange", {}, {{"start", 0.0}, {"end", double(n)}, {"step", 1.0}, {"dtype", DType::I64}});
  return cx.reshape(cx.expand(cx.reshape(rows, {n, 1}), {n, r}), {n * r});
}

/// The index [0]*c0 + [1]*c1 + ... of a repeats tensor known at import time
/// (make_fx's int repeats: full, then expand; or a lifted constant): one
/// count for every row as graph ops, per-row counts as a constant index.
Value* repeatsIndex(Lowering& cx, NodeArgs& a, Value* reps) {
  if (reps->type().rank() > 1) a.fail("repeats", "must be 0-D or 1-D, got " + reps->type().str());
  const std::optional<Tensor> counts = cx.evaluate(reps);
  if (!counts)
    a.fail("repeats", "per-element repeats computed in the graph give a data-dependent shape; Kiln needs them "
                      "known at import time");
  const int64_t n = counts->numel();
  std::vector<int64_t> idx;
  bool uniform = true;
  for (int64_t k = 0; k < n; ++k) {
    const auto c = static_cast<int64_t>(counts->at(k));
    if (c < 0) a.fail("repeats", "must be non-negative");
    uniform = uniform && counts->at(k) == counts->at(0);
    idx.insert(idx.end(), static_cast<size_t>(c), k);
  }
  if (uniform && n > 0) return repeatIndex(cx, n, static_cast<int64_t>(counts->at(0)));
  return cx.constInput(Tensor::fromInt64s({static_cast<int64_t>(idx.size())}, idx));
}

/// repeat_interleave.Tensor(repeats): the index that grouped-query attention's
/// make_fx graph gathers K/V heads with.
FxValue lowerRepeatInterleaveIndex(Lowering& cx, NodeArgs& a) {
  return FxValue::of(repeatsIndex(cx, a, a.tensor("repeats")));
}

/// repeat_interleave.self_int / .self_Tensor(self, repeats, dim=None): each
/// row along dim (of the flattened input without dim) repeated.
FxValue lowerRepeatInterleave(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  int64_t d = 0;
  if (a.given("dim"))
    d = normDim(a.integer("dim"), x->type().rank());
  else
    x = cx.reshape(x, {x->type().numel()});
  const int64_t rows = x->shape()[d];
  Value* idx = nullptr;
  if (a.arg("repeats").kind != FxArg::Kind::Node) {
    const int64_t r = a.integer("repeats");
    if (r < 0) a.fail("repeats", "must be non-negative");
    idx = repeatIndex(cx, rows, r);
  } else {
    Value* reps = a.tensor("repeats");
    const int64_t n = reps->type().numel();
    if (n != 1 && n != rows) a.fail("repeats", std::to_string(n) + " repeats for " + std::to_string(rows) + " rows");
    // One count for every row: expand it (a no-op for n == rows).
    idx = repeatsIndex(cx, a, n == rows ? reps : cx.expand(cx.reshape(reps, {1}), {rows}));
  }
  return FxValue::of(cx.emit("index", {x, idx}, {{"dim", d}}));
}

FxValue lowerConstantPad(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  auto pads = a.ints("pad", kMaxWindow);
  if (std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; })) return FxValue::of(x);
  return FxValue::of(cx.emit("pad", {x}, {{"pads", pads}, {"mode", std::string("constant")}, {"value", a.real("value")}}));
}

/// reflection_pad1d/2d / replication_pad1d/2d(self, padding): Kiln's pad in that mode.
FxValue lowerModePad(Lowering& cx, NodeArgs& a) {
  return FxValue::of(cx.emit("pad", {a.tensor("self")},
                             {{"pads", a.ints("padding", kMaxWindow)}, {"mode", std::string(a.kiln)}, {"value", 0.0}}));
}

FxValue lowerTriangular(Lowering& cx, NodeArgs& a) {
  return FxValue::of(cx.emit(a.kiln, {a.tensor("self")}, {{"diagonal", a.integer("diagonal")}}));
}

constexpr FxRule kRules[] = {
    // Reshapes (views are read by their meaning).
    {"aten.view.default", lowerView},
    {"aten._reshape_alias.default", lowerView},
    {"aten._unsafe_view.default", lowerView},
    {"aten.reshape.default", lowerView},
    {"aten.view_copy.default", lowerView},
    {"aten.as_strided.default", lowerAsStrided},
    {"aten.unsqueeze.default", lowerUnsqueeze},
    {"aten.squeeze.default", lowerSqueeze},
    {"aten.squeeze.dim", lowerSqueeze},
    {"aten.squeeze.dims", lowerSqueeze},
    {"aten.flatten.using_ints", lowerFlatten},
    {"aten.expand.default", lowerExpand},
    {"aten.expand_copy.default", lowerExpand},
    // Dim order.
    {"aten.permute.default", lowerPermute},
    {"aten.transpose.int", lowerTranspose},
    {"aten.t.default", lowerT},
    // Slicing and joining.
    {"aten.slice.Tensor", lowerSlice},
    {"aten.slice_scatter.default", lowerSliceScatter},
    {"aten.select.int", lowerSelect},
    {"aten.select_scatter.default", lowerSelectScatter},
    {"aten.cat.default", lowerCat},
    {"aten.stack.default", lowerStack},
    {"aten.split.Tensor", lowerSplit},
    {"aten.split_with_sizes.default", lowerSplitWithSizes},
    {"aten.unsafe_split.Tensor", lowerSplit},  // what make_fx's unrolled LSTM / GRU cells split their gates with
    {"aten.unsafe_split_with_sizes.default", lowerSplitWithSizes},
    {"aten.chunk.default", lowerChunk},
    {"aten.unbind.int", lowerUnbind},
    // Indexing.
    {"aten.index.Tensor", lowerIndex},
    {"aten.index_put.default", lowerIndexPut},
    {"aten.scatter.src", lowerScatter},
    {"aten.scatter.value", lowerScatter},
    {"aten.scatter.reduce", lowerScatter},
    {"aten.scatter.value_reduce", lowerScatter},
    {"aten.scatter_add.default", lowerScatter, "sum"},
    {"aten.scatter_reduce.two", lowerScatter},
    {"aten.take_along_dim.default", lowerTakeAlongDim},
    {"aten.one_hot.default", lowerOneHot},
    {"aten.index_select.default", lowerIndexSelect},
    {"aten.gather.default", lowerGather},
    // Rearranging and padding.
    {"aten.roll.default", lowerRoll},
    {"aten.flip.default", lowerFlip},
    {"aten.repeat.default", lowerRepeat},
    {"aten.repeat_interleave.Tensor", lowerRepeatInterleaveIndex},
    {"aten.repeat_interleave.self_int", lowerRepeatInterleave},
    {"aten.repeat_interleave.self_Tensor", lowerRepeatInterleave},
    {"aten.constant_pad_nd.default", lowerConstantPad},
    {"aten.reflection_pad1d.default", lowerModePad, "reflect"},
    {"aten.reflection_pad2d.default", lowerModePad, "reflect"},
    {"aten.replication_pad1d.default", lowerModePad, "replicate"},
    {"aten.replication_pad2d.default", lowerModePad, "replicate"},
    {"aten.triu.default", lowerTriangular, "triu"},
    {"aten.tril.default", lowerTriangular, "tril"},
};

}  // namespace

std::span<const FxRule> shapeRules() { return kRules; }

}  // namespace kiln::fx
