// Muon's update of one matrix as graph ops (passes/muon.h).
//
// Why graph ops and not a multi-tensor kernel like adam_update: the
// Newton-Schulz iteration is five rounds of three matrix products per
// matrix, which the GEMM kernels (and their dialects: BLAS, oneDNN, cuBLAS)
// already do best; the elementwise rest is what the fuse pass joins. The
// constants are computed here in double, as torch.optim.Muon's Python
// numbers are, and rounded to the tensor's type where PyTorch rounds them.
#include "passes/muon.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/dtype.h"
#include "core/ir.h"
#include "passes/graph_constants.h"

namespace kiln {
namespace {

constexpr const char* kScope = "optimizer.muon";
constexpr double kA = 3.4445, kB = -4.7750, kC = 2.0315;  // the quintic's coefficients (torch.optim.Muon's)
constexpr double kEps = 1e-7;
constexpr int kSteps = 5;

Value* constantOf(Graph& g, double v, DType dt) {
  return scalarConstant(g, v, dt, kScope);
}

Value* op(Graph& g, const char* name, std::vector<Value*> in, AttrMap attrs = {}) {
  return g.add(name, std::move(in), std::move(attrs), kScope);
}

Value* castTo(Graph& g, Value* v, DType dt) {
  return v->dtype() == dt ? v : op(g, "cast", {v}, {{"dtype", dt}});
}

Value* transposed(Graph& g, Value* m) {
  return op(g, "permute", {m}, {{"dims", std::vector<int64_t>{1, 0}}});
}

/// torch.lerp(start, end, w) for a constant w, as its CPU kernel computes it:
/// start + w * (end - start) for |w| < 0.5, else end - (end - start) * (1 - w).
Value* lerp(Graph& g, Value* start, Value* end, double w) {
  const DType dt = start->dtype();
  Value* diff = op(g, "sub", {end, start});
  if (std::abs(w) < 0.5) return op(g, "add", {start, op(g, "mul", {constantOf(g, w, dt), diff})});
  return op(g, "sub", {end, op(g, "mul", {diff, constantOf(g, 1 - w, dt)})});
}

/// Newton-Schulz: X / (||X||_F + eps), then X <- a X + (b A + c A A) X with A = X X^T, on the wide side.
Value* orthogonalized(Graph& g, Value* u) {
  const DType work = u->dtype() == DType::F64 ? DType::F64 : DType::BF16;
  Value* x = castTo(g, u, work);
  const bool tall = u->shape()[0] > u->shape()[1];
  if (tall) x = transposed(g, x);
  // torch's norm() of a bf16 matrix sums in float and rounds the result to bf16.
  Value* norm = castTo(g, op(g, "global_norm", {castTo(g, x, work == DType::F64 ? work : DType::F32)}), work);
  x = op(g, "div", {x, op(g, "add", {norm, constantOf(g, kEps, work)})});
  for (int i = 0; i < kSteps; ++i) {
    Value* gram = op(g, "matmul", {x, transposed(g, x)});
    Value* poly = op(g, "add", {op(g, "mul", {constantOf(g, kB, work), gram}),
                                op(g, "mul", {constantOf(g, kC, work), op(g, "matmul", {gram, gram})})});
    x = op(g, "add", {op(g, "mul", {constantOf(g, kA, work), x}), op(g, "matmul", {poly, x})});
  }
  return tall ? transposed(g, x) : x;
}

}  // namespace

bool trainsWithMuon(const Value& p) {
  if (p.role() != ValueRole::Param || p.shape().size() != 2 || !isFloating(p.dtype())) return false;
  return std::ranges::none_of(p.uses(), [](const Use& u) { return u.user->is(Op::embedding); });
}

MuonUpdate addMuonUpdate(Graph& g, Value* p, Value* grad, Value* buf, Value* lr, Value* grad_scale,
                         const OptimizerOptions& o) {
  const DType dt = p->dtype();
  Value* gr = castTo(g, grad, dt);
  if (grad_scale) gr = op(g, "mul", {gr, castTo(g, grad_scale, dt)});
  Value* next_buf = lerp(g, buf, gr, 1 - o.muon_momentum);
  Value* u = lerp(g, gr, next_buf, o.muon_momentum);
  Value* ortho = castTo(g, orthogonalized(g, u), dt);
  const double rows = static_cast<double>(p->shape()[0]), cols = static_cast<double>(p->shape()[1]);
  Value* adjusted = op(g, "mul", {lr, constantOf(g, std::sqrt(std::max(1.0, rows / cols)), DType::F64)});
  Value* decayed = p;
  if (o.muon_weight_decay != 0) {
    Value* keep = op(g, "sub", {constantOf(g, 1.0, DType::F64),
                                op(g, "mul", {lr, constantOf(g, o.muon_weight_decay, DType::F64)})});
    decayed = op(g, "mul", {p, castTo(g, keep, dt)});
  }
  Value* next = op(g, "sub", {decayed, op(g, "mul", {ortho, castTo(g, adjusted, dt)})});
  return {next, next_buf};
}

}  // namespace kiln
