// Gradient rules for the reduction family (see core/grad.h).
#include "core/grad.h"
#include "core/ops/op_helpers.h"

namespace kiln {
namespace {

/// Gradient of a reduction's output, reshaped to keep the reduced dims (size
/// 1) and broadcast back to the input's shape.
Value* expandReduced(GradContext& c, Value* g) {
  const Shape& in = c.in(0)->shape();
  auto axes = reductionAxes(c.node(), c.node().is("dims"), static_cast<int64_t>(in.size()));
  Shape kept = reducedShape(in, axes, true);
  if (g->shape() != kept) g = c.op("reshape", {g}, {{"shape", std::vector<int64_t>(kept.begin(), kept.end())}});
  return c.op("expand", {g}, {{"shape", std::vector<int64_t>(in.begin(), in.end())}});
}

void sumGrad(GradContext& c) { c.setGrad(0, expandReduced(c, c.grad())); }

void meanGrad(GradContext& c) {
  const TensorType& in = c.in(0)->type();
  double count = static_cast<double>(in.numel()) / static_cast<double>(std::max<int64_t>(c.out()->type().numel(), 1));
  Value* scaled = c.op("div", {c.grad(), c.scalar(count, c.grad()->dtype())});
  c.setGrad(0, expandReduced(c, scaled));
}

}  // namespace

void registerReductionGrads(OpTable& t) {
  t.setGrad("sum", sumGrad);
  t.setGrad("mean", meanGrad);
  for (const char* r : {"argmax", "argmin"}) t.setNoGrad(r, "integer result");
}

}  // namespace kiln
