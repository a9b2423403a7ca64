// Reductions over a set of axes (`dims`; empty means all axes), arg-reductions
// and top-k indices over one axis, and cumulative sums. Sums of integers and bools give i64, as
// in PyTorch.
#include "core/ops/op_helpers.h"

namespace kiln {
namespace {

std::vector<TensorType> inferReduce(const Node& n) {
  const TensorType& in = n.input(0)->type();
  auto axes = reductionAxes(n, n.is("dims"), in.rank());
  DType t = in.dtype;
  if ((n.is(Op::sum) || n.is(Op::prod)) && !isFloating(t)) t = DType::I64;
  if ((n.is(Op::mean) || n.is(Op::var)) && !isFloating(t))
    opFail(n, "needs a floating-point input, got " + in.str());
  return {{t, reducedShape(in.shape, axes, n.i("keepdim") != 0)}};
}

std::vector<TensorType> inferArgReduce(const Node& n) {
  const TensorType& in = n.input(0)->type();
  int64_t axis = normalizeAxis(n.i("dim"), in.rank());
  if (in.rank() == 0) return {{DType::I64, {}}};  // torch.argmax of a scalar is 0
  return {{DType::I64, reducedShape(in.shape, {axis}, n.i("keepdim") != 0)}};
}

std::vector<TensorType> inferCumsum(const Node& n) {
  const TensorType& in = n.input(0)->type();
  normalizeAxis(n.i("dim"), in.rank());
  return {{isFloating(in.dtype) ? in.dtype : DType::I64, in.shape}};
}

/// topk's indices: the input's shape with `dim` cut to k.
std::vector<TensorType> inferTopk(const Node& n) {
  const TensorType& in = n.input(0)->type();
  if (in.rank() == 0) opFail(n, "needs at least one dim, got " + in.str());
  const int64_t axis = normalizeAxis(n.i("dim"), in.rank()), k = n.i("k");
  if (k < 0 || k > in.shape[axis])
    opFail(n, "k=" + std::to_string(k) + " is out of range for dim " + std::to_string(axis) + " of " + in.str());
  const std::string& ties = n.s("ties");
  if (ties != "stable" && ties != "topk" && ties != "kthvalue")
    opFail(n, "ties must be \"stable\", \"topk\" or \"kthvalue\", got \"" + ties + "\"");
  if (ties == "kthvalue" && n.i("largest") != 0) opFail(n, "ties=\"kthvalue\" selects the smallest (largest=0)");
  Shape out = in.shape;
  out[axis] = k;
  return {{DType::I64, out}};
}

Cost reduceCost(const Node& n) {
  return {static_cast<double>(n.input(0)->type().numel()), ioBytes(n)};
}

}  // namespace

void registerReductionOps(OpTable& t) {
  const std::vector<int64_t> all;
  for (const char* r : {"sum", "mean", "amax", "amin", "prod"})
    t.add({r, "reduce over dims (empty = all)", 1, 1, kReduction,
           {optAttr("dims", all), optAttr("keepdim", int64_t{0})}, inferReduce, reduceCost});
  t.add({"var", "variance over dims with Bessel-style correction", 1, 1, kReduction,
         {optAttr("dims", all), optAttr("correction", 1.0), optAttr("keepdim", int64_t{0})}, inferReduce, reduceCost});
  for (const char* r : {"argmax", "argmin"})
    t.add({r, "index of the extreme value along dim (first on ties)", 1, 1, kReduction,
           {reqAttr("dim", AttrKind::Int), optAttr("keepdim", int64_t{0})}, inferArgReduce, reduceCost});
  t.add({"topk",
         "indices of the k largest (largest=1) or smallest values along dim, best first, NaN counting as larger "
         "than any number (values: gather with them); tied values in the order `ties` names: \"stable\" (the "
         "lower index first: torch.sort(stable=True)), \"topk\" (PyTorch's CPU torch.topk), \"kthvalue\" "
         "(PyTorch's CPU torch.kthvalue at position k-1, the k-1 smaller before it in its quickselect's order)",
         1,
         1,
         kReduction,
         {reqAttr("k", AttrKind::Int), reqAttr("dim", AttrKind::Int), optAttr("largest", int64_t{1}),
          optAttr("ties", std::string("stable"))},
         inferTopk,
         reduceCost});
  t.add({"cumsum", "inclusive prefix sum along dim", 1, 1, kReduction, {reqAttr("dim", AttrKind::Int)}, inferCumsum,
         reduceCost});
  t.add({"cumprod", "inclusive prefix product along dim", 1, 1, kReduction, {reqAttr("dim", AttrKind::Int)},
         inferCumsum, reduceCost});
}

}  // namespace kiln
