// Shared decompositions (see common.h): embedding_bag (nn.EmbeddingBag,
// F.embedding_bag): the rows of `weight` picked by `indices`, reduced per bag
// (sum, mean or max), bags given by `offsets` into the 1-D indices.
//
// Fixed-length bags (a 2-D input, which F.embedding_bag flattens with offsets
// arange(0, N, L), known at import) reduce over a reshaped [B, L, D] gather.
// Any other offsets -- known or a runtime tensor -- work too, since only the
// number of bags fixes the output's shape: each position's bag is the number
// of offsets at or before it, minus one (a scatter of ones at the offsets and
// a cumulative sum), and the bags are summed with index_add. Padding entries
// (padding_idx) and the positions after the last offset of
// include_last_offset count for nothing; an empty bag is zeros, as in PyTorch.
#pragma once

#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/import/decompositions/common.h"

namespace kiln::decomp {

struct EmbeddingBagSpec {
  int64_t mode = 0;  ///< PyTorch's enum: 0 sum, 1 mean, 2 max
  bool include_last_offset = false;
  std::optional<int64_t> padding_idx;  ///< already normalized to [0, rows)
  bool scale_grad_by_freq = false;
};

/// The common bag length L when `offsets` (known at import) are 0, L, 2L, ...
/// covering n indices exactly; nullopt otherwise.
inline std::optional<int64_t> uniformBagLength(const Tensor& offsets, int64_t bags, int64_t n) {
  if (bags <= 0 || n % bags) return std::nullopt;
  const int64_t len = n / bags;
  for (int64_t b = 0; b < offsets.numel(); ++b)
    if (static_cast<int64_t>(offsets.at(b)) != b * len) return std::nullopt;
  return len;
}

/// The contents of offsets made by an `arange` node (F.embedding_bag's
/// offsets for a 2-D input), or nullopt.
inline std::optional<Tensor> arangeContents(const Value* v) {
  const Node* p = v->producer();
  if (!p || !p->is(Op::arange)) return std::nullopt;
  Tensor out(v->type());
  for (int64_t i = 0; i < out.numel(); ++i) out.set(i, p->f("start") + static_cast<double>(i) * p->f("step"));
  return out;
}

/// embedding_bag's first result [B, D]; `known_offsets` is the offsets'
/// contents when the importer knows them (nullptr otherwise; offsets made
/// by an arange node are read here).
template <class Cx>
Value* embeddingBag(Cx& cx, Value* weight, Value* indices, Value* offsets, const Tensor* known_offsets,
                    Value* per_sample_weights, const EmbeddingBagSpec& s) {
  if (weight->type().rank() != 2) fail("embedding_bag needs a 2-D weight, got " + weight->type().str());
  if (indices->type().rank() != 1 || isFloating(indices->dtype()))
    fail("embedding_bag needs 1-D integer indices (F.embedding_bag flattens a 2-D input), got " +
         indices->type().str());
  if (offsets->type().rank() != 1) fail("embedding_bag needs 1-D offsets, got " + offsets->type().str());
  if (s.mode < 0 || s.mode > 2) fail("embedding_bag: mode " + std::to_string(s.mode) + " is not sum, mean or max");
  if (per_sample_weights && s.mode != 0)
    fail("embedding_bag: per_sample_weights are only supported with mode 'sum' (as in PyTorch)");
  const DType t = weight->dtype();
  const int64_t n = indices->shape()[0], d = weight->shape()[1];
  const int64_t bags = offsets->shape()[0] - (s.include_last_offset ? 1 : 0);
  if (bags < 0) fail("embedding_bag: include_last_offset needs at least one offset");
  const double ninf = -std::numeric_limits<double>::infinity();

  Value* rows = cx.emit("embedding", {weight, indices},
                        {{"padding_idx", s.padding_idx.value_or(-1)},
                         {"scale_grad_by_freq", int64_t{s.scale_grad_by_freq}}});  // [N, D]
  // Which positions count: not padding (a bool [N] mask), or all.
  Value* keep = s.padding_idx ? cx.emit("ne", {indices, cx.scalar(static_cast<double>(*s.padding_idx),
                                                                    indices->dtype())})
                              : nullptr;
  Value* scale = per_sample_weights ? cx.cast(per_sample_weights, t) : nullptr;  // [N]

  const std::optional<Tensor> ranged = known_offsets ? std::nullopt : arangeContents(offsets);
  if (ranged) known_offsets = &*ranged;
  const std::optional<int64_t> len = known_offsets ? uniformBagLength(*known_offsets, bags, n) : std::nullopt;
  if (len && *len > 0) {  // fixed-length bags: reduce a [B, L, D] view over L
    const Shape bld{bags, *len, d}, bl1{bags, *len, 1};
    Value* x = reshapedTo(cx, rows, bld);
    Value* k = keep ? reshapedTo(cx, keep, bl1) : nullptr;
    const std::vector<int64_t> over_l{1};
    if (s.mode == 2) {
      if (k) x = cx.emit("where", {k, x, cx.scalar(ninf, t)});
      Value* m = cx.emit("amax", {x}, {{"dims", over_l}, {"keepdim", int64_t{0}}});
      if (!k) return m;
      Value* any = cx.emit("amax", {cx.cast(k, t)}, {{"dims", over_l}, {"keepdim", int64_t{0}}});  // [B, 1]
      return cx.emit("where", {cx.cast(any, DType::Bool), m, cx.scalar(0.0, t)});
    }
    Value* w = scale ? reshapedTo(cx, scale, bl1) : nullptr;
    if (k) w = w ? cx.emit("mul", {w, cx.cast(k, t)}) : cx.cast(k, t);
    if (w) x = cx.emit("mul", {x, w});
    Value* sum = cx.emit("sum", {x}, {{"dims", over_l}, {"keepdim", int64_t{0}}});
    if (s.mode == 0) return sum;
    if (!k) return cx.emit("div", {sum, cx.scalar(static_cast<double>(*len), t)});
    Value* count = cx.emit("sum", {cx.cast(k, t)}, {{"dims", over_l}, {"keepdim", int64_t{0}}});  // [B, 1]
    return cx.emit("div", {sum, cx.emit("clamp", {count}, {{"min", 1.0}})});
  }

  // Any offsets: bag[i] = #{b : offsets[b] <= i} - 1, through a scatter of
  // ones at the offsets (N + 1 slots: an empty last bag starts at N) and a
  // cumulative sum.
  const int64_t all = offsets->shape()[0];
  Value* marks = cx.emit("index_add", {cx.emit("full", {}, {{"shape", Shape{n + 1}}, {"value", 0.0}, {"dtype", DType::F32}}),
                                       offsets,
                                       cx.emit("full", {}, {{"shape", Shape{all}}, {"value", 1.0}, {"dtype", DType::F32}})},
                         {{"dim", int64_t{0}}});
  marks = cx.emit("slice", {marks}, {{"dim", int64_t{0}}, {"start", int64_t{0}}, {"end", n}, {"step", int64_t{1}}});
  Value* bag = cx.emit("sub", {cx.emit("cumsum", {cx.cast(marks, DType::I64)}, {{"dim", int64_t{0}}}),
                               cx.scalar(1.0, DType::I64)});  // [N], -1 before the first offset
  Value* inside = cx.emit("logical_and", {cx.emit("ge", {bag, cx.scalar(0.0, DType::I64)}),
                                          cx.emit("lt", {bag, cx.scalar(static_cast<double>(bags), DType::I64)})});
  Value* counts_pos = keep ? cx.emit("logical_and", {inside, keep}) : inside;  // [N] bool
  Value* slot = cx.emit("where", {counts_pos, bag, cx.scalar(0.0, DType::I64)});
  Value* w = cx.cast(counts_pos, t);
  if (s.mode == 2) {
    // [B, N] membership, max over the members (B * N * D elements).
    Value* ids = cx.emit("arange", {}, {{"start", 0.0}, {"end", static_cast<double>(bags)}, {"step", 1.0},
                                        {"dtype", DType::I64}});
    Value* member = cx.emit("logical_and", {cx.emit("eq", {reshapedTo(cx, slot, {1, n}), reshapedTo(cx, ids, {bags, 1})}),
                                            reshapedTo(cx, counts_pos, {1, n})});  // [B, N]
    Value* vals = cx.emit("where", {reshapedTo(cx, member, {bags, n, 1}), reshapedTo(cx, rows, {1, n, d}),
                                    cx.scalar(ninf, t)});
    Value* m = cx.emit("amax", {vals}, {{"dims", std::vector<int64_t>{1}}, {"keepdim", int64_t{0}}});
    Value* any = cx.emit("amax", {cx.cast(member, t)}, {{"dims", std::vector<int64_t>{1}}, {"keepdim", int64_t{1}}});
    return cx.emit("where", {cx.cast(any, DType::Bool), m, cx.scalar(0.0, t)});
  }
  if (scale) w = cx.emit("mul", {w, scale});
  Value* x = cx.emit("mul", {rows, reshapedTo(cx, w, {n, 1})});
  Value* zeros = cx.emit("full", {}, {{"shape", Shape{bags, d}}, {"value", 0.0}, {"dtype", t}});
  Value* sum = cx.emit("index_add", {zeros, slot, x}, {{"dim", int64_t{0}}});
  if (s.mode == 0) return sum;
  Value* count = cx.emit("index_add", {cx.emit("full", {}, {{"shape", Shape{bags}}, {"value", 0.0}, {"dtype", t}}), slot,
                                       cx.cast(counts_pos, t)},
                         {{"dim", int64_t{0}}});
  return cx.emit("div", {sum, reshapedTo(cx, cx.emit("clamp", {count}, {{"min", 1.0}}), {bags, 1})});
}

}  // namespace kiln::decomp
