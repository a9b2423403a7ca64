// Optimizer ops: one node updates every parameter at once (multi-tensor),
// so a backend can fuse the whole update into one kernel launch, and nothing
// in it needs a value on the host: the learning rate, the step counter and
// the gradient scale (from global-norm clipping) are 0-d tensor inputs.
//
//   sgd_update(lr, step, grad_scale, p0, g0[, buf0], p1, g1[, buf1], ...)
//       -> p0', [buf0',] p1', [buf1',] ...        (buf present iff momentum != 0)
//   adam_update(lr, step, grad_scale, p0, g0, m0, v0, ...) -> p0', m0', v0', ...
//       (g may be bf16 beside an f32 parameter: amp's gradient, read widened,
//       which is what its cast to f32 gives; passes/fuse.cpp folds that cast
//       on the CPU)
//   global_norm(t0, t1, ...) -> sqrt(sum of all squares), 0-d
//
// `step` is the step being taken (1 on the first); `grad_scale` multiplies
// every gradient first (1, the clipping coefficient, and/or 1/loss scale).
// skip_nonfinite=1 (amp's fp16 loss scaler) makes a non-finite grad_scale
// mean "some gradient was inf/NaN": every output is then its input, bit for
// bit, decided inside the kernel without a host sync. The formulas are
// torch.optim's single-tensor ones, in the same order (backend/cpu/
// kernels_optim.cpp); decoupled=1 makes Adam AdamW.
#include "core/ops/op_helpers.h"

namespace kiln {
namespace {

constexpr size_t kOptimizerScalars = 3;  // lr, step, grad_scale

void requireScalars(const Node& n) {
  static const char* names[] = {"lr", "step", "grad_scale"};
  for (size_t i = 0; i < kOptimizerScalars; ++i)
    if (!n.input(i)->shape().empty() || !isFloating(n.input(i)->dtype()))
      opFail(n, std::string(names[i]) + " must be a 0-d floating tensor, got " + n.input(i)->type().str());
}

/// Checks groups of `per` inputs after the scalars: all of one parameter's shape
/// and dtype (with `bf16_grad`, the gradient, second in its group, may be bf16
/// beside an f32 parameter). Returns the output types: the first `out_per`
/// of each group.
std::vector<TensorType> inferGroups(const Node& n, size_t per, size_t out_per, bool bf16_grad = false) {
  requireScalars(n);
  size_t rest = n.numInputs() - kOptimizerScalars;
  if (rest == 0 || rest % per)
    opFail(n, "expects lr, step, grad_scale and groups of " + std::to_string(per) + " tensors, got " +
                  std::to_string(n.numInputs()) + " inputs");
  std::vector<TensorType> out;
  for (size_t g = kOptimizerScalars; g < n.numInputs(); g += per) {
    const TensorType& p = n.input(g)->type();
    if (!isFloating(p.dtype)) opFail(n, "parameter " + p.str() + " is not floating point");
    for (size_t k = 1; k < per; ++k) {
      const TensorType& t = n.input(g + k)->type();
      const bool widened = bf16_grad && k == 1 && p.dtype == DType::F32 && t.dtype == DType::BF16;
      if (widened ? t.shape != p.shape : t != p)
        opFail(n, "tensor " + t.str() + " does not match its parameter " + p.str());
    }
    for (size_t k = 0; k < out_per; ++k) out.push_back(p);
  }
  return out;
}

std::vector<TensorType> inferSgd(const Node& n) {
  bool momentum = n.f("momentum") != 0;
  if (n.f("momentum") < 0 || n.f("weight_decay") < 0) opFail(n, "momentum and weight_decay must be >= 0");
  if (n.i("nesterov") && (!momentum || n.f("dampening") != 0))
    opFail(n, "Nesterov momentum requires a momentum and zero dampening");
  return inferGroups(n, momentum ? 3 : 2, momentum ? 2 : 1);
}

std::vector<TensorType> inferAdam(const Node& n) {
  double b1 = n.f("beta1"), b2 = n.f("beta2");
  if (!(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1)) opFail(n, "betas must be in [0, 1)");
  if (!(n.f("eps") >= 0) || !(n.f("weight_decay") >= 0)) opFail(n, "eps and weight_decay must be >= 0");
  return inferGroups(n, 4, 3, /*bf16_grad=*/true);
}

std::vector<TensorType> inferGlobalNorm(const Node& n) {
  for (Value* v : n.inputs())
    if (!isFloating(v->dtype())) opFail(n, "inputs must be floating point, got " + v->type().str());
  return {{n.input(0)->dtype(), {}}};
}

/// Flops per parameter element.
template <int k>
Cost perElementCost(const Node& n) {
  double elems = 0;
  for (Value* v : n.outputs()) elems += static_cast<double>(v->type().numel());
  return {k * elems, ioBytes(n)};
}

Cost normCost(const Node& n) {
  double elems = 0;
  for (Value* v : n.inputs()) elems += static_cast<double>(v->type().numel());
  return {2 * elems, ioBytes(n)};
}

}  // namespace

void registerOptimizerOps(OpTable& t) {
  t.add({"sgd_update", "SGD over all parameters (momentum, dampening, Nesterov, weight decay)", 5, -1, 0,
         {optAttr("momentum", 0.0), optAttr("dampening", 0.0), optAttr("nesterov", int64_t{0}),
          optAttr("weight_decay", 0.0), optAttr("skip_nonfinite", int64_t{0})},
         inferSgd, perElementCost<4>});
  t.add({"adam_update", "Adam / AdamW (decoupled=1) over all parameters", 7, -1, 0,
         {optAttr("beta1", 0.9), optAttr("beta2", 0.999), optAttr("eps", 1e-8), optAttr("weight_decay", 0.0),
          optAttr("decoupled", int64_t{0}), optAttr("skip_nonfinite", int64_t{0})},
         inferAdam, perElementCost<12>});
  t.add({"global_norm", "sqrt of the sum of squares of all inputs (gradient clipping)", 1, -1, kReduction,
         {}, inferGlobalNorm, normCost});
}

}  // namespace kiln
