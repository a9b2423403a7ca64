// Collective ops: communication between the ranks of a data-parallel step
// (passes/data_parallel.h inserts them). Each output has its input's type;
// on one rank they are the identity (allreduce's average divides by 1).
//
//   allreduce(t0, t1, ...) {bucket, average, sparse, block} -> t0', t1', ...
//       every rank gets the sum over ranks (average=1: the mean, each rank's
//       values divided by the world size before the sum, as DDP does);
//       sparse=1: block-sparse exchange of the non-zero `block`-element
//       blocks (backend/comm/sparse_allreduce.h), same result.
//   broadcast(t0, ...) {root} -> t0', ...   every rank gets rank root's values
//   reduce_scatter(t0, t1, ...) {bucket, average, rank, owners} -> the
//       inputs `rank` owns, summed (averaged) over ranks: ZeRO-1's gradient
//       bucket. owners[k] is the rank that owns input k; the outputs are the
//       inputs with owners[k] == rank, in input order. Every rank passes the
//       same inputs and owners; the graph differs per rank in `rank` only.
//   allgather(t0, t1, ...) {bucket, rank, owners} -> t0', t1', ...
//       every rank gets each tensor as its owner has it (ZeRO-1's updated
//       parameters); the inputs this rank does not own are placeholders of
//       the right type whose values are not read.
//
// `bucket` numbers the collective for reports (the order backward fills the
// buckets in; -1 the loss and metrics, -2 ZeRO-1's clipping norm). The ops are side effects: every rank must run the
// same ones in the same order, so no pass may remove, merge or fold them; backends run them asynchronously and wait at
// the first reader of an output.
#include "core/ops/op_helpers.h"

namespace kiln {
namespace {

std::vector<TensorType> inferCollective(const Node& n) {
  std::vector<TensorType> out;
  for (Value* v : n.inputs()) out.push_back(v->type());
  if (n.is(Op::allreduce)) {
    if (n.i("sparse") && n.numInputs() != 1) opFail(n, "a sparse allreduce takes one tensor");
    if (n.i("sparse") && n.i("block") < 1) opFail(n, "a sparse allreduce needs block >= 1");
    for (Value* v : n.inputs())
      if (v->dtype() == DType::Bool) opFail(n, "cannot sum a bool tensor");
  }
  if (n.is(Op::broadcast) && n.i("root") < 0) opFail(n, "root must be >= 0");
  if (n.is(Op::reduce_scatter) || n.is(Op::allgather)) {
    const std::vector<int64_t>& owners = n.is("owners");
    if (owners.size() != n.numInputs())
      opFail(n, "owners has " + std::to_string(owners.size()) + " ranks for " + std::to_string(n.numInputs()) +
                    " tensors");
    if (n.i("rank") < 0) opFail(n, "rank must be >= 0");
    for (int64_t o : owners)
      if (o < 0) opFail(n, "an owner rank must be >= 0");
    for (Value* v : n.inputs())
      if (n.is(Op::reduce_scatter) && v->dtype() == DType::Bool) opFail(n, "cannot sum a bool tensor");
    if (n.is(Op::reduce_scatter)) {
      std::vector<TensorType> owned;
      for (size_t k = 0; k < owners.size(); ++k)
        if (owners[k] == n.i("rank")) owned.push_back(out[k]);
      return owned;
    }
  }
  return out;
}

/// Moves each tensor once (the bytes on the wire are the communicator's
/// business; the report records them).
Cost collectiveCost(const Node& n) {
  double elems = 0;
  for (Value* v : n.inputs()) elems += static_cast<double>(v->type().numel());
  const bool averages = (n.is(Op::allreduce) || n.is(Op::reduce_scatter)) && n.i("average");
  return {averages ? elems : 0.0, ioBytes(n)};
}

}  // namespace

void registerCollectiveOps(OpTable& t) {
  t.add({"allreduce",
         "sum (or mean) of each tensor over the data-parallel ranks",
         1,
         -1,
         kCollective | kSideEffect,
         {optAttr("bucket", int64_t{0}), optAttr("average", int64_t{1}), optAttr("sparse", int64_t{0}),
          optAttr("block", int64_t{0})},
         inferCollective,
         collectiveCost});
  t.add({"broadcast",
         "every rank gets rank root's tensors",
         1,
         -1,
         kCollective | kSideEffect,
         {optAttr("root", int64_t{0})},
         inferCollective,
         collectiveCost});
  t.add({"reduce_scatter",
         "each rank gets the sum (or mean) over ranks of the tensors it owns (ZeRO-1 gradients)",
         1,
         -1,
         kCollective | kSideEffect,
         {optAttr("bucket", int64_t{0}), optAttr("average", int64_t{1}), reqAttr("rank", AttrKind::Int),
          reqAttr("owners", AttrKind::Ints)},
         inferCollective,
         collectiveCost});
  t.add({"allgather",
         "every rank gets each tensor from the rank that owns it (ZeRO-1 parameters)",
         1,
         -1,
         kCollective | kSideEffect,
         {optAttr("bucket", int64_t{0}), reqAttr("rank", AttrKind::Int), reqAttr("owners", AttrKind::Ints)},
         inferCollective,
         collectiveCost});
  t.setNoGrad("allreduce", "inserted after autodiff, on gradients");
  t.setNoGrad("reduce_scatter", "inserted after autodiff, on gradients");
  t.setNoGrad("allgather", "inserted after the optimizer, on parameters");
  t.setNoGrad("broadcast", "inserted after autodiff, on buffer updates");
}

}  // namespace kiln
