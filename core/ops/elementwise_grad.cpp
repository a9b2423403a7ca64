// Gradient rules for the elementwise family (see core/grad.h). Binary ops
// broadcast, so their rules reduce with setGradBroadcast; type promotion in
// the forward is undone by setGrad's cast.
#include "core/grad.h"
#include "core/ops/op_helpers.h"

namespace kiln {
namespace {

void addGrad(GradContext& c) {
  c.setGradBroadcast(0, c.grad());
  c.setGradBroadcast(1, c.grad());
}

void subGrad(GradContext& c) {
  c.setGradBroadcast(0, c.grad());
  if (c.needs(1)) c.setGradBroadcast(1, c.op("neg", {c.grad()}));
}

void mulGrad(GradContext& c) {
  if (c.needs(0)) c.setGradBroadcast(0, c.op("mul", {c.grad(), c.in(1)}));
  if (c.needs(1)) c.setGradBroadcast(1, c.op("mul", {c.grad(), c.in(0)}));
}

void reluGrad(GradContext& c) {
  // d relu = g where y > 0 (PyTorch: threshold_backward on the output).
  Value* zero = c.scalar(0.0, c.out()->dtype());
  Value* pos = c.op("gt", {c.out(), zero});
  c.setGrad(0, c.op("where", {pos, c.grad(), zero}));
}

}  // namespace

void registerElementwiseGrads(OpTable& t) {
  t.setGrad("add", addGrad);
  t.setGrad("sub", subGrad);
  t.setGrad("mul", mulGrad);
  t.setGrad("relu", reluGrad);
  for (const char* c : {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "logical_not"})
    t.setNoGrad(c, "boolean result");
}

}  // namespace kiln
