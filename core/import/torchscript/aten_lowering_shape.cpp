// aten -> Kiln: views and layout (view/reshape/flatten/squeeze/permute/
// transpose/expand/slice/select/split/...), joining (cat/stack), indexing
// and padding.
// Sizes with -1 and negative dims are resolved here, so Kiln attributes hold
// plain non-negative values. View results are registered with the lowering
// context so in-place writes into them reach their base.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/import/decompositions/index.h"
#include "core/import/torchscript/lowering.h"
#include "core/ops/op_helpers.h"
#include "core/result.h"

namespace kiln::ts {
namespace {

using Out = std::vector<SV>;
using Step = ViewStep::Kind;

int64_t rankOf(Value* v) {
  return v->type().rank();
}

/// A reshape target with one -1 resolved against `in`.
Shape resolveShape(const Shape& in, const std::vector<int64_t>& spec) {
  Shape out(spec);
  int64_t known = 1, infer_at = -1;
  for (size_t k = 0; k < out.size(); ++k) {
    if (out[k] == -1) {
      if (infer_at >= 0) fail("only one dimension can be -1 in " + shapeStr(spec));
      infer_at = static_cast<int64_t>(k);
    } else if (out[k] < 0) {
      fail("invalid size in " + shapeStr(spec));
    } else {
      known *= out[k];
    }
  }
  int64_t total = numelOf(in);
  if (infer_at >= 0) {
    if (known == 0 || total % known) fail("cannot reshape " + shapeStr(in) + " to " + shapeStr(spec));
    out[infer_at] = total / known;
  }
  if (numelOf(out) != total) fail("cannot reshape " + shapeStr(in) + " to " + shapeStr(spec));
  return out;
}

/// A reshape of `src` as a tracked view (no node when the shape is unchanged).
SV reshapeView(Lowering& cx, const SV& src, Value* x, const Shape& shape) {
  Value* v = x->shape() == shape ? x : cx.emit("reshape", {x}, {{"shape", shape}});
  ViewStep s;
  s.kind = Step::Reshape;
  s.ints = shape;
  return cx.view(src, s, v);
}

SV permuteView(Lowering& cx, const SV& src, Value* x, const std::vector<int64_t>& dims) {
  bool identity = true;
  for (size_t k = 0; k < dims.size(); ++k) identity = identity && dims[k] == static_cast<int64_t>(k);
  Value* v = identity ? x : cx.emit("permute", {x}, {{"dims", dims}});
  ViewStep s;
  s.kind = Step::Permute;
  s.ints = dims;
  return cx.view(src, s, v);
}

SV sliceView(Lowering& cx, const SV& src, Value* x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  int64_t size = x->shape()[dim];
  SliceBounds b = normalizeSlice(size, start, end, step);
  ViewStep s;
  s.kind = Step::Slice;
  s.dim = dim;
  s.start = b.start;
  s.end = std::max(b.start, b.end);
  s.step = step;
  bool whole = b.start == 0 && b.length == size;
  Value* v = whole ? x : cx.emit("slice", {x}, {{"dim", dim}, {"start", s.start}, {"end", s.end}, {"step", step}});
  return cx.view(src, s, v);
}

SV selectView(Lowering& cx, const SV& src, Value* x, int64_t dim, int64_t index) {
  int64_t size = x->shape()[dim];
  if (index < -size || index >= size)
    fail("index " + std::to_string(index) + " is out of range for size " + std::to_string(size));
  if (index < 0) index += size;
  ViewStep s;
  s.kind = Step::Select;
  s.dim = dim;
  s.start = index;
  return cx.view(src, s, cx.emit("select", {x}, {{"dim", dim}, {"index", index}}));
}

// ---- Views ------------------------------------------------------------------------

// view(self, size) / reshape(self, shape)
Out lowerReshape(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  if (a[1].kind == SV::Kind::Int && a.kiln_op == "view") fail("view(dtype) is not supported");
  return {reshapeView(cx, a[0], x, resolveShape(x->shape(), a.ints(1)))};
}

// view_as(self, other) / reshape_as(self, other)
Out lowerReshapeAs(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  return {reshapeView(cx, a[0], x, a.tensor(1)->shape())};
}

// flatten(self, start_dim=0, end_dim=-1)
Out lowerFlatten(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  const Shape& in = x->shape();
  if (in.empty()) return {reshapeView(cx, a[0], x, {1})};
  int64_t r = rankOf(x), s = normDim(a.given(1) ? a.integer(1) : 0, r), e = normDim(a.given(2) ? a.integer(2) : -1, r);
  if (s > e) fail("flatten() has start_dim " + std::to_string(s) + " after end_dim " + std::to_string(e));
  Shape out(in.begin(), in.begin() + s);
  int64_t n = 1;
  for (int64_t k = s; k <= e; ++k) n *= in[k];
  out.push_back(n);
  out.insert(out.end(), in.begin() + e + 1, in.end());
  return {reshapeView(cx, a[0], x, out)};
}

// unflatten(self, dim, sizes)
Out lowerUnflatten(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  const Shape& in = x->shape();
  int64_t d = normDim(a.integer(1), rankOf(x));
  Shape mid = resolveShape({in[d]}, a.ints(2));
  Shape out(in.begin(), in.begin() + d);
  out.insert(out.end(), mid.begin(), mid.end());
  out.insert(out.end(), in.begin() + d + 1, in.end());
  return {reshapeView(cx, a[0], x, out)};
}

// squeeze(self) / squeeze(self, dim) / squeeze(self, dims)
Out lowerSqueeze(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  const Shape& in = x->shape();
  std::vector<bool> drop(in.size(), false);
  if (a.size() < 2) {
    for (size_t k = 0; k < in.size(); ++k) drop[k] = in[k] == 1;
  } else {
    for (int64_t d : a.ints(1)) {
      if (in.empty()) continue;
      int64_t n = normDim(d, rankOf(x));
      drop[n] = in[n] == 1;
    }
  }
  Shape out;
  for (size_t k = 0; k < in.size(); ++k)
    if (!drop[k]) out.push_back(in[k]);
  return {reshapeView(cx, a[0], x, out)};
}

// unsqueeze(self, dim)
Out lowerUnsqueeze(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  Shape out = x->shape();
  int64_t d = normDim(a.integer(1), rankOf(x) + 1);
  out.insert(out.begin() + d, 1);
  return {reshapeView(cx, a[0], x, out)};
}

// permute(self, dims)
Out lowerPermute(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  std::vector<int64_t> dims = a.ints(1);
  if (static_cast<int64_t>(dims.size()) != rankOf(x)) fail("permute() dims do not match the tensor's rank");
  for (int64_t& d : dims) d = normDim(d, rankOf(x));
  return {permuteView(cx, a[0], x, dims)};
}

// transpose(self, dim0, dim1) / t(self) / movedim(self, source, destination)
Out lowerTranspose(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  int64_t r = rankOf(x);
  std::vector<int64_t> dims(static_cast<size_t>(r));
  for (int64_t k = 0; k < r; ++k) dims[k] = k;
  if (a.kiln_op == "t") {
    if (r > 2) fail("t() expects a tensor with at most 2 dims");
    if (r < 2) return {a[0]};
    std::swap(dims[0], dims[1]);
  } else if (a.kiln_op == "movedim") {
    std::vector<int64_t> src = a.ints(1), dst = a.ints(2);
    if (src.size() != dst.size()) fail("movedim() source and destination differ in length");
    std::vector<int64_t> order(static_cast<size_t>(r), -1);
    std::vector<bool> used(static_cast<size_t>(r), false);
    for (size_t k = 0; k < src.size(); ++k) {
      order[normDim(dst[k], r)] = normDim(src[k], r);
      used[normDim(src[k], r)] = true;
    }
    int64_t next = 0;
    for (auto& o : order) {
      if (o >= 0) continue;
      while (used[next]) ++next;
      o = next++;
    }
    dims = order;
  } else {
    if (r == 0) return {a[0]};
    std::swap(dims[normDim(a.integer(1), r)], dims[normDim(a.integer(2), r)]);
  }
  return {permuteView(cx, a[0], x, dims)};
}

// expand(self, size, implicit) / expand_as(self, other)
Out lowerExpand(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  std::vector<int64_t> spec = a.kiln_op == "expand_as" ? a.tensor(1)->shape() : a.ints(1);
  const Shape& in = x->shape();
  if (spec.size() < in.size()) fail("expand() to fewer dims " + shapeStr(spec) + " than " + shapeStr(in));
  size_t lead = spec.size() - in.size();
  for (size_t k = lead; k < spec.size(); ++k)
    if (spec[k] == -1) spec[k] = in[k - lead];
  ViewStep s;
  s.kind = Step::Expand;
  s.ints = spec;
  Value* v = spec == in ? x : cx.emit("expand", {x}, {{"shape", spec}});
  return {cx.view(a[0], s, v)};
}

// slice(self, dim=0, start=None, end=None, step=1)
Out lowerSlice(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  if (rankOf(x) == 0) fail("slice() of a 0-d tensor");
  int64_t d = normDim(a.given(1) ? a.integer(1) : 0, rankOf(x));
  int64_t start = a.given(2) ? a.integer(2) : 0;
  int64_t end = a.given(3) ? a.integer(3) : std::numeric_limits<int64_t>::max();
  int64_t step = a.given(4) ? a.integer(4) : 1;
  if (step <= 0) fail("slice() step must be positive");
  return {sliceView(cx, a[0], x, d, start, end, step)};
}

// narrow(self, dim, start, length)
Out lowerNarrow(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  int64_t d = normDim(a.integer(1), rankOf(x));
  int64_t start = a.integer(2), len = a.integer(3);
  if (start < 0) start += x->shape()[d];
  return {sliceView(cx, a[0], x, d, start, start + len, 1)};
}

// select(self, dim, index)
Out lowerSelect(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  return {selectView(cx, a[0], x, normDim(a.integer(1), rankOf(x)), a.integer(2))};
}

/// Split `x` along `dim` into `sizes`; each piece is a slice view of the source.
SV splitInto(Lowering& cx, const SV& src, Value* x, int64_t dim, const std::vector<int64_t>& sizes) {
  std::vector<SV> pieces;
  if (sizes.size() == 1) {
    pieces.push_back(sliceView(cx, src, x, dim, 0, sizes[0], 1));
    return SV::list(std::move(pieces));
  }
  Node* n = cx.emitNode("split", {x}, {{"dim", dim}, {"sizes", sizes}});
  int64_t start = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    ViewStep s;
    s.kind = Step::Slice;
    s.dim = dim;
    s.start = start;
    s.end = start + sizes[k];
    s.step = 1;
    pieces.push_back(cx.view(src, s, n->output(k)));
    start += sizes[k];
  }
  return SV::list(std::move(pieces));
}

/// Pieces of `size` along a dim of length `n` (the last one shorter), as torch.split does.
std::vector<int64_t> evenPieces(int64_t n, int64_t size) {
  if (size <= 0) fail("split size must be positive");
  std::vector<int64_t> out;
  for (int64_t s = 0; s < n; s += size) out.push_back(std::min(size, n - s));
  if (out.empty()) out.push_back(0);
  return out;
}

// split(self, split_size | split_sizes, dim=0) / split_with_sizes(self, split_sizes, dim=0)
Out lowerSplit(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  int64_t d = normDim(a.given(2) ? a.integer(2) : 0, rankOf(x));
  std::vector<int64_t> sizes = a[1].kind == SV::Kind::Int ? evenPieces(x->shape()[d], a.integer(1)) : a.ints(1);
  return {splitInto(cx, a[0], x, d, sizes)};
}

// chunk(self, chunks, dim=0): pieces of ceil(n / chunks)
Out lowerChunk(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  int64_t d = normDim(a.given(2) ? a.integer(2) : 0, rankOf(x));
  int64_t chunks = a.integer(1), n = x->shape()[d];
  if (chunks <= 0) fail("chunk() needs a positive number of chunks");
  return {splitInto(cx, a[0], x, d, evenPieces(n, std::max<int64_t>(1, (n + chunks - 1) / chunks)))};
}

// unbind(self, dim=0): selects along dim
Out lowerUnbind(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  int64_t d = normDim(a.given(1) ? a.integer(1) : 0, rankOf(x));
  std::vector<SV> pieces;
  for (int64_t k = 0; k < x->shape()[d]; ++k) pieces.push_back(selectView(cx, a[0], x, d, k));
  return {SV::list(std::move(pieces))};
}

// ---- Joining -----------------------------------------------------------------------

/// The tensors of a list argument in their common dtype.
std::vector<Value*> promotedList(Lowering& cx, const SV& list) {
  const auto& items = list.elems();
  if (items.empty()) fail("expects a non-empty list of tensors");
  std::vector<const SV*> ops;
  for (const SV& s : items) ops.push_back(&s);
  DType t = resultType(ops);
  std::vector<Value*> out;
  for (const SV& s : items) out.push_back(cx.operand(s, t));
  return out;
}

// cat(tensors, dim=0); legacy 1-d empty tensors are skipped as PyTorch does.
Out lowerCat(Lowering& cx, Args& a) {
  std::vector<Value*> all = promotedList(cx, a[0]), ins;
  for (Value* v : all)
    if (!(v->type().rank() == 1 && v->shape()[0] == 0)) ins.push_back(v);
  if (ins.empty()) return single(cx, all[0]);
  int64_t d = normDim(a.given(1) ? a.integer(1) : 0, rankOf(ins[0]));
  if (ins.size() == 1) return single(cx, ins[0]);
  return single(cx, cx.emit("cat", ins, {{"dim", d}}));
}

// stack(tensors, dim=0) = cat of unsqueezed tensors
Out lowerStack(Lowering& cx, Args& a) {
  std::vector<Value*> ins = promotedList(cx, a[0]);
  int64_t d = normDim(a.given(1) ? a.integer(1) : 0, rankOf(ins[0]) + 1);
  for (Value*& v : ins) {
    Shape s = v->shape();
    s.insert(s.begin() + d, 1);
    v = cx.emit("reshape", {v}, {{"shape", s}});
  }
  if (ins.size() == 1) return single(cx, ins[0]);
  return single(cx, cx.emit("cat", ins, {{"dim", d}}));
}

// broadcast_tensors(tensors): each expanded to the common shape
Out lowerBroadcastTensors(Lowering& cx, Args& a) {
  const auto& items = a[0].elems();
  Shape common;
  for (const SV& s : items) {
    const Shape& in = cx.read(s)->shape();
    if (in.size() > common.size()) common.insert(common.begin(), in.size() - common.size(), 1);
    size_t lead = common.size() - in.size();
    for (size_t k = 0; k < in.size(); ++k) {
      int64_t& c = common[lead + k];
      if (c != in[k] && c != 1 && in[k] != 1)
        fail("shapes " + shapeStr(common) + " and " + shapeStr(in) + " do not broadcast");
      if (c == 1) c = in[k];
    }
  }
  std::vector<SV> out;
  for (const SV& s : items) {
    Value* x = cx.read(s);
    ViewStep step;
    step.kind = Step::Expand;
    step.ints = common;
    out.push_back(cx.view(s, step, x->shape() == common ? x : cx.emit("expand", {x}, {{"shape", common}})));
  }
  return {SV::list(std::move(out))};
}

// ---- Indexing ----------------------------------------------------------------------

Value* indexTensor(Lowering& cx, const SV& idx) {
  Value* i = cx.read(idx);
  if (i->dtype() == DType::Bool || i->dtype() == DType::U8)
    fail("indexing with a boolean mask has a data-dependent shape; Kiln needs static shapes");
  if (!isIntegral(i->dtype())) fail("index tensors must hold integers, got " + i->type().str());
  return i;
}

/// The index list of index / index_put: a tensor or nullptr (None) per leading dim.
std::vector<Value*> indexList(Lowering& cx, const SV& list) {
  std::vector<Value*> out;
  for (const SV& i : list.elems()) out.push_back(i.isNone() ? nullptr : cx.read(i));
  return out;
}

// index(self, indices): x[idx], x[:, idx] (one index along a dim), x[i, j]
// and x[:, i, :, j] (several, broadcast together); a boolean mask gives a
// data-dependent shape.
Out lowerIndex(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  Value* y = decomp::indexWith(cx, x, indexList(cx, a[1]));
  return y == x ? Out{a[0]} : single(cx, y);
}

// index_put(self, indices, values, accumulate=False) (index_put_ in place:
// x[idx] = v, x[i, j] += v, x[mask] = 0)
Out lowerIndexPut(Lowering& cx, Args& a) {
  return single(cx, decomp::indexPut(cx, a.tensor(0), indexList(cx, a[1]), a.tensor(2), a.given(3) && a.flag(3)));
}

// scatter(self, dim, index, src | value[, reduce]) (and scatter_ in place)
Out lowerScatter(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  const bool tensor = a[3].isTensorLike();
  const std::string reduce = a.size() > 4 && a.given(4) ? a.str(4) : std::string();
  return single(cx, decomp::scatter(cx, x, a.integer(1), a.tensor(2), tensor ? a.tensor(3) : nullptr,
                                    tensor ? 0.0 : a.real(3), reduce));
}

// scatter_add(self, dim, index, src)
Out lowerScatterAdd(Lowering& cx, Args& a) {
  return single(cx, decomp::scatter(cx, a.tensor(0), a.integer(1), a.tensor(2), a.tensor(3), 0.0, "sum"));
}

// scatter_reduce(self, dim, index, src, reduce, *, include_self=True)
Out lowerScatterReduce(Lowering& cx, Args& a) {
  return single(cx, decomp::scatter(cx, a.tensor(0), a.integer(1), a.tensor(2), a.tensor(3), 0.0, a.str(4),
                                    !a.given(5) || a.flag(5)));
}

// take_along_dim(self, indices, dim=None)
Out lowerTakeAlongDim(Lowering& cx, Args& a) {
  std::optional<int64_t> dim;
  if (a.given(2)) dim = a.integer(2);
  return single(cx, decomp::takeAlongDim(cx, a.tensor(0), a.tensor(1), dim));
}

// index_select(self, dim, index)
Out lowerIndexSelect(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  int64_t d = normDim(a.integer(1), rankOf(x));
  return single(cx, cx.emit("index", {x, indexTensor(cx, a[2])}, {{"dim", d}}));
}

// gather(self, dim, index, sparse_grad=False)
Out lowerGather(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  int64_t d = normDim(a.integer(1), rankOf(x));
  return single(cx, cx.emit("gather", {x, indexTensor(cx, a[2])}, {{"dim", d}}));
}

// roll(self, shifts, dims=[])
Out lowerRoll(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  std::vector<int64_t> dims = a.given(2) ? a.ints(2) : std::vector<int64_t>{};
  for (int64_t& d : dims) d = normDim(d, rankOf(x));
  return single(cx, cx.emit("roll", {x}, {{"shifts", a.ints(1)}, {"dims", dims}}));
}

// flip(self, dims)
Out lowerFlip(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  std::vector<int64_t> dims = a.ints(1);
  for (int64_t& d : dims) d = normDim(d, rankOf(x));
  return single(cx, cx.emit("flip", {x}, {{"dims", dims}}));
}

// repeat(self, repeats)
Out lowerRepeat(Lowering& cx, Args& a) {
  return single(cx, cx.emit("repeat", {a.tensor(0)}, {{"repeats", a.ints(1)}}));
}

/// repeat_interleave's counts, one per row of `rows`: an int, or a tensor
/// known at import time (a count that depends on data would give the graph
/// a data-dependent shape).
std::vector<int64_t> repeatCounts(const SV& r, int64_t rows) {
  if (r.isNumber()) return std::vector<int64_t>(static_cast<size_t>(rows), static_cast<int64_t>(r.number()));
  if (r.kind != SV::Kind::Const)
    fail("repeat_interleave with repeats computed from data has a data-dependent shape; Kiln needs them known "
         "at import time");
  const Tensor& t = r.constant;
  if (t.numel() != 1 && t.numel() != rows)
    fail("repeat_interleave: " + std::to_string(t.numel()) + " repeats for " + std::to_string(rows) + " rows");
  std::vector<int64_t> counts(static_cast<size_t>(rows));
  for (int64_t k = 0; k < rows; ++k) counts[k] = static_cast<int64_t>(t.at(t.numel() == 1 ? 0 : k));
  for (int64_t c : counts)
    if (c < 0) fail("repeat_interleave: negative repeats");
  return counts;
}

/// The index [0]*c0 + [1]*c1 + ...: repeat_interleave(repeats) itself.
Tensor repeatIndex(const std::vector<int64_t>& counts) {
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  Tensor idx(DType::I64, {n});
  int64_t at = 0;
  for (size_t k = 0; k < counts.size(); ++k)
    for (int64_t j = 0; j < counts[k]; ++j) idx.set(at++, static_cast<double>(k));
  return idx;
}

// repeat_interleave(self, repeats, dim=None, output_size=None) with an int or
// static tensor `repeats` (grouped-query attention's shared K/V heads), and
// repeat_interleave(repeats, output_size=None), the index it gathers with.
// Equal counts become reshape -> expand -> reshape (a broadcast copy); other
// counts an index along `dim` with a constant index.
Out lowerRepeatInterleave(Lowering& cx, Args& a) {
  if (a.size() <= 2) {  // repeat_interleave(repeats): a constant index
    const SV& r = a[0];
    if (r.kind != SV::Kind::Const || r.constant.rank() != 1)
      fail("repeat_interleave(repeats) needs a 1-D repeats tensor known at import time");
    return {SV::constTensor(repeatIndex(repeatCounts(r, r.constant.numel())))};
  }
  auto reshaped = [&](Value* v, const Shape& s) { return v->shape() == s ? v : cx.emit("reshape", {v}, {{"shape", s}}); };
  Value* x = a.tensor(0);
  int64_t d = 0;
  if (a.given(2))
    d = normDim(a.integer(2), rankOf(x));
  else
    x = reshaped(x, {x->type().numel()});  // no dim: the flattened input
  const Shape in = x->shape();
  const std::vector<int64_t> counts = repeatCounts(a[1], in[d]);
  const bool uniform = std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; });
  if (!uniform || in[d] == 0) {
    Value* idx = cx.read(SV::constTensor(repeatIndex(counts)));
    return single(cx, cx.emit("index", {x, idx}, {{"dim", d}}));
  }
  const int64_t r = counts[0];
  Shape split = in, wide = in, out = in;
  split.insert(split.begin() + d + 1, 1);
  wide.insert(wide.begin() + d + 1, r);
  out[d] *= r;
  Value* v = cx.emit("expand", {reshaped(x, split)}, {{"shape", wide}});
  return single(cx, reshaped(v, out));
}

// pad(self, pad, mode="constant", value=None) / constant_pad_nd(self, pad, value=0) /
// reflection_padNd / replication_padNd(self, padding)
Out lowerPad(Lowering& cx, Args& a) {
  Value* x = a.tensor(0);
  std::string mode = std::string(a.kiln_op);
  double value = 0;
  if (mode == "pad") {
    mode = a.given(2) ? a.str(2) : "constant";
    value = a.given(3) ? a.real(3) : 0.0;
  } else if (mode == "constant") {
    value = a.given(2) ? a.real(2) : 0.0;
  }
  return single(cx, cx.emit("pad", {x}, {{"pads", a.ints(1)}, {"mode", mode}, {"value", value}}));
}

// triu/tril(self, diagonal=0)
Out lowerTriangular(Lowering& cx, Args& a) {
  int64_t diag = a.given(1) ? a.integer(1) : 0;
  return single(cx, cx.emit(a.kiln_op, {a.tensor(0)}, {{"diagonal", diag}}));
}

// one_hot(self, num_classes) = (self[..., None] == arange(num_classes)) as i64
Out lowerOneHot(Lowering& cx, Args& a) {
  return single(cx, decomp::oneHot(cx, a.tensor(0), a.given(1) ? a.integer(1) : -1));
}

const AtenRule kRules[] = {
    // Views (tracked for in-place writes).
    {"aten::view", lowerReshape, "view"},
    {"aten::reshape", lowerReshape, "reshape"},
    {"aten::_reshape_alias", lowerReshape, "reshape"},
    {"aten::view_as", lowerReshapeAs},
    {"aten::reshape_as", lowerReshapeAs},
    {"aten::flatten", lowerFlatten},
    {"aten::unflatten", lowerUnflatten},
    {"aten::squeeze", lowerSqueeze},
    {"aten::unsqueeze", lowerUnsqueeze},
    {"aten::permute", lowerPermute},
    {"aten::transpose", lowerTranspose, "transpose"},
    {"aten::swapaxes", lowerTranspose, "transpose"},
    {"aten::swapdims", lowerTranspose, "transpose"},
    {"aten::t", lowerTranspose, "t"},
    {"aten::movedim", lowerTranspose, "movedim"},
    {"aten::expand", lowerExpand, "expand"},
    {"aten::expand_as", lowerExpand, "expand_as"},
    {"aten::slice", lowerSlice},
    {"aten::narrow", lowerNarrow},
    {"aten::select", lowerSelect},
    {"aten::split", lowerSplit},
    {"aten::split_with_sizes", lowerSplit},
    {"aten::unsafe_split", lowerSplit},
    {"aten::chunk", lowerChunk},
    {"aten::unsafe_chunk", lowerChunk},
    {"aten::unbind", lowerUnbind},
    // Joining.
    {"aten::cat", lowerCat},
    {"aten::concat", lowerCat},
    {"aten::stack", lowerStack},
    {"aten::broadcast_tensors", lowerBroadcastTensors},
    // Indexing and rearranging.
    {"aten::index", lowerIndex},
    {"aten::index_put", lowerIndexPut},
    {"aten::_index_put_impl", lowerIndexPut},
    {"aten::scatter", lowerScatter},
    {"aten::scatter_add", lowerScatterAdd},
    {"aten::scatter_reduce", lowerScatterReduce},
    {"aten::take_along_dim", lowerTakeAlongDim},
    {"aten::index_select", lowerIndexSelect},
    {"aten::gather", lowerGather},
    {"aten::roll", lowerRoll},
    {"aten::flip", lowerFlip},
    {"aten::repeat", lowerRepeat},
    {"aten::repeat_interleave", lowerRepeatInterleave},
    {"aten::pad", lowerPad, "pad"},
    {"aten::constant_pad_nd", lowerPad, "constant"},
    {"aten::reflection_pad1d", lowerPad, "reflect"},
    {"aten::reflection_pad2d", lowerPad, "reflect"},
    {"aten::replication_pad1d", lowerPad, "replicate"},
    {"aten::replication_pad2d", lowerPad, "replicate"},
    {"aten::triu", lowerTriangular, "triu"},
    {"aten::tril", lowerTriangular, "tril"},
    {"aten::one_hot", lowerOneHot},
};

}  // namespace

std::span<const AtenRule> shapeRules() {
  return kRules;
}

}  // namespace kiln::ts
