// Row-sparse gradients: an embedding's gradient kept as the rows the batch
// touched instead of a [num_rows, dim] tensor that is almost all zeros, from
// the backward through the data-parallel exchange to the SGD update
// (passes/data_parallel.h, passes/sparse_updates.h), so that no step makes a
// pass over the whole table. A row-sparse tensor is a pair
//
//   rows   i64[C]     the rows, ascending and distinct, then -1 padding
//   values T[C, dim]  row j's values; zero in the padding
//
// with a capacity C fixed at compile time (shapes are static) and the number
// of real rows known only when the step runs.
//
//   embedding_backward_rows(g, indices) {num_weights, padding_idx}
//       -> rows i64[K], values T[K, dim]     K = indices.numel()
//       embedding_backward without scale_grad_by_freq, coalesced: each row
//       the batch touched (padding_idx's excepted) once, its values the sum
//       of its positions' gradients in index order from +0 (the dense
//       kernel's order, so rows_to_dense of it has the same bits).
//   allreduce_rows(rows, values) {bucket, average, num_rows, world_size}
//       -> rows i64[C], values T[C, dim]     C = min(world_size x K, num_rows)
//       the sum over the ranks (average=1: each rank's values divided by the
//       world size first, as DDP does), as the union of the ranks' rows: a
//       collective, exchanged block-sparse (backend/comm/sparse_allreduce.h).
//   rows_to_dense(rows, values) {num_rows} -> T[num_rows, dim]
//       the dense tensor: zero where no row is.
//   sgd_update_rows(lr, step, grad_scale, p, rows, values) {skip_nonfinite}
//       -> p'    sgd_update without momentum or weight decay, whose update
//       of a zero gradient row is that row unchanged: only the listed rows
//       are computed (in place, the rest is never touched).
#include "core/ops/op_helpers.h"

namespace kiln {
namespace {

void requireRows(const Node& n, size_t rows, size_t values) {
  const TensorType& r = n.input(rows)->type();
  const TensorType& v = n.input(values)->type();
  if (r.dtype != DType::I64 || r.shape.size() != 1) opFail(n, "rows must be i64[C], got " + r.str());
  if (!isFloating(v.dtype) || v.shape.size() != 2 || v.shape[0] != r.shape[0])
    opFail(n, "values must be floating [" + std::to_string(r.shape[0]) + ", dim], got " + v.str());
}

int64_t positive(const Node& n, const char* attr) {
  const int64_t x = n.i(attr);
  if (x < 1) opFail(n, std::string(attr) + " must be at least 1, got " + std::to_string(x));
  return x;
}

std::vector<TensorType> inferEmbeddingBackwardRows(const Node& n) {
  const TensorType& g = n.input(0)->type();
  const TensorType& idx = n.input(1)->type();
  if (!isFloating(g.dtype)) opFail(n, "gradient must be floating, got " + g.str());
  if (isFloating(idx.dtype) || idx.dtype == DType::Bool) opFail(n, "indices must be integers, got " + idx.str());
  positive(n, "num_weights");
  if (g.shape.size() != idx.shape.size() + 1 || !std::equal(idx.shape.begin(), idx.shape.end(), g.shape.begin()))
    opFail(n, "gradient " + g.str() + " is not indices " + idx.str() + " plus an embedding dim");
  const int64_t k = idx.numel();
  return {{DType::I64, {k}}, {g.dtype, {k, g.shape.back()}}};
}

std::vector<TensorType> inferAllreduceRows(const Node& n) {
  requireRows(n, 0, 1);
  const int64_t rows = positive(n, "num_rows"), world = positive(n, "world_size");
  const TensorType& v = n.input(1)->type();
  const int64_t c = std::min(world * v.shape[0], rows);
  return {{DType::I64, {c}}, {v.dtype, {c, v.shape[1]}}};
}

std::vector<TensorType> inferRowsToDense(const Node& n) {
  requireRows(n, 0, 1);
  const TensorType& v = n.input(1)->type();
  return {{v.dtype, {positive(n, "num_rows"), v.shape[1]}}};
}

std::vector<TensorType> inferSgdUpdateRows(const Node& n) {
  static const char* names[] = {"lr", "step", "grad_scale"};
  for (size_t i = 0; i < 3; ++i)
    if (!n.input(i)->shape().empty() || !isFloating(n.input(i)->dtype()))
      opFail(n, std::string(names[i]) + " must be a 0-d floating tensor, got " + n.input(i)->type().str());
  requireRows(n, 4, 5);
  const TensorType& p = n.input(3)->type();
  const TensorType& v = n.input(5)->type();
  if (p.shape.size() != 2 || p.dtype != v.dtype || p.shape[1] != v.shape[1])
    opFail(n, "parameter " + p.str() + " does not take rows of " + v.str());
  return {p};
}

/// Each value element is added or moved once; the dense sides are not read.
Cost rowsCost(const Node& n) {
  double elems = 0, bytes = 0;
  for (Value* v : n.inputs()) bytes += static_cast<double>(v->type().bytes());
  for (Value* v : n.outputs()) bytes += static_cast<double>(v->type().bytes());
  const TensorType& values = n.is(Op::embedding_backward_rows) ? n.input(0)->type() : n.input(1)->type();
  elems = static_cast<double>(values.numel());
  return {elems, bytes};
}

/// The update reads and writes the listed rows of p only.
Cost sgdRowsCost(const Node& n) {
  const TensorType& v = n.input(5)->type();
  const double elems = static_cast<double>(v.numel());
  return {2 * elems, 3 * static_cast<double>(v.bytes()) + static_cast<double>(n.input(4)->type().bytes())};
}

}  // namespace

void registerRowSparseOps(OpTable& t) {
  t.add({"embedding_backward_rows",
         "embedding gradient as the rows the batch touched (row-sparse: rows, values)",
         2,
         2,
         0,
         {reqAttr("num_weights", AttrKind::Int), optAttr("padding_idx", int64_t{-1})},
         inferEmbeddingBackwardRows,
         rowsCost});
  t.add({"allreduce_rows",
         "sum (or mean) over the data-parallel ranks of a row-sparse tensor, exchanging only its rows",
         2,
         2,
         kCollective | kSideEffect,
         {optAttr("bucket", int64_t{0}), optAttr("average", int64_t{1}), reqAttr("num_rows", AttrKind::Int),
          reqAttr("world_size", AttrKind::Int)},
         inferAllreduceRows,
         rowsCost});
  t.add({"rows_to_dense",
         "the dense tensor of a row-sparse one (zero where no row is)",
         2,
         2,
         0,
         {reqAttr("num_rows", AttrKind::Int)},
         inferRowsToDense,
         nullptr});
  t.add({"sgd_update_rows",
         "SGD (no momentum, no weight decay) of the rows of a parameter that a row-sparse gradient lists",
         6,
         6,
         0,
         {optAttr("skip_nonfinite", int64_t{0})},
         inferSgdUpdateRows,
         sgdRowsCost});
  t.setNoGrad("embedding_backward_rows", "inserted after autodiff, on gradients");
  t.setNoGrad("allreduce_rows", "inserted after autodiff, on gradients");
  t.setNoGrad("rows_to_dense", "inserted after autodiff, on gradients");
  t.setNoGrad("sgd_update_rows", "an optimizer update");
}

}  // namespace kiln
