// Shared decompositions (see common.h): topk / sort / kthvalue, advanced
// indexing with several index tensors, index_put_, the scatters,
// take_along_dim and one_hot, over Kiln's index / gather / index_add /
// scatter_add.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "core/import/decompositions/common.h"

namespace kiln::decomp {

/// The (values, indices) pair of topk, sort and kthvalue.
struct ValuesIndices {
  Value* values;
  Value* indices;
};

/// The k best along dim (largest or smallest, best first; a 0-d x reads as
/// [1]): Kiln's topk gives the indices and a gather the values, so the
/// values' gradient is gather's (a scatter_add into x's shape) and the
/// indices have none. Tied values in the order `ties` names (topk's
/// attribute): "topk" for torch.topk, "stable" for sort and argsort
/// (torch.sort(stable=True); an unstable torch.sort leaves ties in an order
/// that depends on its kernel, x86-simd-sort's in recent PyTorch builds).
template <class Cx>
ValuesIndices topk(Cx& cx, Value* x, int64_t k, int64_t dim, bool largest, const char* ties) {
  if (x->type().rank() == 0) x = reshapedTo(cx, x, {1});
  const int64_t d = normalizeAxis(dim, x->type().rank());
  Value* idx = cx.emit("topk", {x}, {{"k", k}, {"dim", d}, {"largest", int64_t{largest}}, {"ties", std::string(ties)}});
  return {cx.emit("gather", {x, idx}, {{"dim", d}}), idx};
}

/// kthvalue(x, k, dim, keepdim): the k-th smallest (1-based) along dim, the
/// index among ties PyTorch's CPU kthvalue returns.
template <class Cx>
ValuesIndices kthvalue(Cx& cx, Value* x, int64_t k, int64_t dim, bool keepdim) {
  if (x->type().rank() == 0) x = reshapedTo(cx, x, {1});
  const int64_t d = normalizeAxis(dim, x->type().rank());
  if (k < 1 || k > x->shape()[d]) fail("kthvalue: k=" + std::to_string(k) + " is out of range for " + x->type().str());
  Value* idx = cx.emit("topk", {x}, {{"k", k}, {"dim", d}, {"largest", int64_t{0}}, {"ties", std::string("kthvalue")}});
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

/// max(x, dim) / min(x, dim) -> (values, indices): argmax/argmin (the first
/// extreme, a NaN first of all) and a gather of the values there, so the
/// whole gradient goes to the returned index as PyTorch's
/// value_selecting_reduction_backward sends it (amax/amin split it among
/// ties, which is right for amax and not for max with indices).
template <class Cx>
ValuesIndices maxMinDim(Cx& cx, Value* x, int64_t dim, bool keepdim, bool is_max) {
  const bool scalar = x->type().rank() == 0;
  if (scalar) x = reshapedTo(cx, x, {1});
  const int64_t d = normalizeAxis(dim, x->type().rank());
  Value* idx = cx.emit(is_max ? "argmax" : "argmin", {x}, {{"dim", d}, {"keepdim", int64_t{1}}});
  Value* values = cx.emit("gather", {x, idx}, {{"dim", d}});
  if (!keepdim || scalar) {
    Shape s = idx->shape();
    s.erase(s.begin() + d);
    if (scalar) s.clear();
    idx = reshapedTo(cx, idx, s);
    values = reshapedTo(cx, values, s);
  }
  return {values, idx};
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
/// scalar `value`. reduce: "" (replace), "sum"/"add", "mean", and
/// "prod"/"multiply", "amax", "amin" through Kiln's scatter_reduce (src cut
/// to index's extent, the part PyTorch reads).
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
  if (reduce == "prod" || reduce == "multiply" || reduce == "amax" || reduce == "amin") {
    for (int64_t k = 0; k < src->type().rank(); ++k)
      if (src->shape()[k] > index->shape()[k])
        src = cx.emit("slice", {src}, {{"dim", k}, {"start", int64_t{0}}, {"end", index->shape()[k]}, {"step", int64_t{1}}});
    return cx.emit("scatter_reduce", {x, index, src},
                   {{"dim", d}, {"reduce", std::string(reduce == "multiply" ? "prod" : reduce)},
                    {"include_self", int64_t{include_self}}});
  }
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
  fail("scatter with reduce=" + reduce + " is not supported (sum, add, mean, prod, multiply, amax and amin are)");
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

}  // namespace kiln::decomp
