// Ops the optimizer creates (passes/fuse.cpp), not importers:
//
//   fused_elementwise(x0, x1, ...) {body}
//   fused_reduction(x0, x1, ...) {body, reduce="sum"|"mean", dims, keepdim}
//
// A chain of elementwise ops computed in one pass over memory. `body` is the
// fused sub-graph, a region the node owns (a graph-valued attribute,
// core/attribute.h; the text IR prints it nested in the node): one Data
// input per operand of the node, in order, and its returns are the node's
// outputs. Every operand has the outputs' shape, holds one element, or
// broadcasts along one contiguous run of dims (broadcastRunInner), so the
// kernel reaches all of them from one flat index. Shape inference checks
// the body against the operands, so the verifier checks fused nodes as
// strictly as any other. Cost: the body's flops, but only the
// operands and outputs as bytes moved, which is the point of fusing.
//
// fused_reduction is the same loop ending in a sum or mean (attributes as
// those ops') of the body's first output: node output 0 is that reduction,
// outputs 1.. are the body's other outputs at the loop shape.
#include "core/grad.h"
#include "core/ops/op_helpers.h"

namespace kiln {
namespace {

/// The body, checked against the node's operands.
const Graph& checkedBody(const Node& n) {
  const Graph* g = &n.subgraph("body");
  if (g->inputs().size() != n.numInputs())
    opFail(n, "body takes " + std::to_string(g->inputs().size()) + " operands, the node has " +
                  std::to_string(n.numInputs()));
  for (size_t i = 0; i < n.numInputs(); ++i)
    if (g->inputs()[i]->type() != n.input(i)->type())
      opFail(n, "operand " + std::to_string(i) + " is " + n.input(i)->type().str() + ", the body expects " +
                    g->inputs()[i]->type().str());
  if (g->outputs().empty()) opFail(n, "body returns nothing");
  return *g;
}

/// The body's output types, checked to share one loop shape that every
/// operand broadcasts to.
std::vector<TensorType> bodyOutputTypes(const Node& n) {
  const Graph& body = checkedBody(n);
  std::vector<TensorType> out;
  for (const GraphOutput& o : body.outputs()) out.push_back(o.value->type());
  const Shape& shape = out[0].shape;
  for (const TensorType& t : out)
    if (t.shape != shape) opFail(n, "body outputs differ in shape: " + t.str() + " vs " + out[0].str());
  for (const Value* v : n.inputs())
    if (!broadcastRunInner(v->shape(), shape))
      opFail(n, "operand " + v->type().str() + " does not broadcast to " + shapeStr(shape) +
                    " along one run of dims (the output shape, a scalar, or e.g. a bias)");
  return out;
}

std::vector<TensorType> inferFused(const Node& n) { return bodyOutputTypes(n); }

std::vector<TensorType> inferFusedReduction(const Node& n) {
  std::vector<TensorType> out = bodyOutputTypes(n);
  const std::string& r = n.s("reduce");
  if (r != "sum" && r != "mean") opFail(n, "reduce is '" + r + "', expected sum or mean");
  if (out[0].dtype != DType::F32 && out[0].dtype != DType::F64)
    opFail(n, "reduces " + out[0].str() + ", expected f32 or f64");
  const auto axes = reductionAxes(n, n.is("dims"), out[0].rank());
  out[0].shape = reducedShape(out[0].shape, axes, n.i("keepdim") != 0);
  return out;
}

Cost fusedCost(const Node& n) {
  const Graph& body = checkedBody(n);
  double flops = 0;
  for (const auto& b : body.nodes()) flops += nodeCost(*b).flops;
  if (n.is(Op::fused_reduction)) flops += static_cast<double>(body.outputs()[0].value->type().numel());
  return {flops, ioBytes(n)};
}

/// Fusion runs after autodiff, so a gradient through a fused node means a
/// pipeline in the wrong order: say so instead of differentiating the body.
void fusedGrad(GradContext& c) {
  opFail(c.node(), c.node().op() + " has no gradient: run the fuse pass after autodiff");
}

}  // namespace

void registerFusedOps(OpTable& t) {
  t.add({"fused_elementwise", "elementwise chain in one pass over memory (made by the fuse pass)", 1, -1,
         kElementwise, {reqAttr("body", AttrKind::Graph)}, inferFused, fusedCost});
  t.setGrad("fused_elementwise", fusedGrad);
  const std::vector<int64_t> all;
  t.add({"fused_reduction", "elementwise chain ending in a sum or mean, in one pass (made by the fuse pass)", 1, -1,
         kReduction,
         {reqAttr("body", AttrKind::Graph), reqAttr("reduce", AttrKind::String), optAttr("dims", all),
          optAttr("keepdim", int64_t{0})},
         inferFusedReduction, fusedCost});
  t.setGrad("fused_reduction", fusedGrad);
}

}  // namespace kiln
