// sparse_updates: SGD updates only the rows a row-sparse gradient lists.
//
// What it does: in an sgd_update without momentum and weight decay, a
// parameter whose gradient is rows_to_dense(rows, values) (data_parallel's
// row-sparse embedding gradient, core/ops/row_sparse.cpp) leaves the node
// and gets sgd_update_rows(lr, step, grad_scale, p, rows, values): the rows
// the batch touched are updated in place and the rest of the table is never
// read or written. A rows_to_dense that nothing else reads goes too, so the
// step holds no dense copy of the gradient. Clipping or amp's scale still
// reach the update through grad_scale (their norm reads the dense gradient).
//
// Why only plain SGD: momentum and weight decay change every row each step,
// as do Adam's moments, so their update is dense by nature (the gradient
// reaches them through rows_to_dense).
//
// Needs: the optimizer has run (after split_updates, which it does not
// require). Guarantees: the same values bit for bit: on a row with no
// gradient the dense update computes p + (-lr) x (0 x scale) = p.
#pragma once

#include "passes/pass.h"

namespace kiln {

/// Statistics: row_updates (parameters now updated row by row).
Result<PassResult> runSparseUpdates(Graph& g, PassContext& ctx);

}  // namespace kiln
