// aten matrix products -> Kiln `matmul` and `linear`. nn.Linear on 2-D input
// traces as addmm(bias, x, t(weight)) (or mm(x, t(weight)) without bias);
// that pattern becomes linear(x, weight, bias), the form GEMM-with-epilogue
// kernels want. Everything else is matmul plus the beta/alpha arithmetic.
#include "core/import/decompositions/nn.h"
#include "core/import/fx/fx_lowering.h"
#include "core/result.h"

namespace kiln::fx {
namespace {

void requireRank(NodeArgs& a, std::string_view name, Value* v, int64_t rank) {
  if (v->type().rank() != rank)
    a.fail(name, "expected a " + std::to_string(rank) + "-D tensor, got " + v->type().str());
}

/// The weight W when `m` is t(W) for a 2-D W, else nullptr.
Value* transposedWeight(Lowering& cx, Value* m) {
  auto it = cx.transpose_of.find(m);
  return it == cx.transpose_of.end() ? nullptr : it->second;
}

Value* scaled(Lowering& cx, Value* v, double factor) {
  return factor == 1 ? v : cx.emit("mul", {v, cx.full(factor, v->dtype())});
}

/// beta * input + alpha * product (beta == 0 ignores input, as PyTorch does).
Value* addScaled(Lowering& cx, Value* input, Value* product, double beta, double alpha) {
  product = scaled(cx, product, alpha);
  if (beta == 0) return product;  // input broadcasts to the product's shape in addmm/baddbmm
  Operand ops[] = {{input, {}}, {product, {}}};
  DType t = resultType(ops);
  return cx.emit("add", {cx.cast(scaled(cx, input, beta), t), cx.cast(product, t)});
}

FxValue lowerMm(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  Value* m = a.tensor("mat2");
  requireRank(a, "self", x, 2);
  requireRank(a, "mat2", m, 2);
  if (Value* w = transposedWeight(cx, m)) return FxValue::of(cx.emit("linear", {x, w}));
  return FxValue::of(cx.emit("matmul", {x, m}));
}

/// addmm(self, mat1, mat2, beta, alpha) = beta * self + alpha * (mat1 @ mat2).
FxValue lowerAddmm(Lowering& cx, NodeArgs& a) {
  Value* bias = a.tensor("self");
  Value* x = a.tensor("mat1");
  Value* m = a.tensor("mat2");
  requireRank(a, "mat1", x, 2);
  requireRank(a, "mat2", m, 2);
  double beta = a.real("beta"), alpha = a.real("alpha");
  Value* w = transposedWeight(cx, m);
  if (w && beta == 1 && alpha == 1 && bias->shape() == Shape{w->shape()[0]} && bias->dtype() == x->dtype())
    return FxValue::of(cx.emit("linear", {x, w, bias}));
  return FxValue::of(addScaled(cx, bias, cx.emit("matmul", {x, m}), beta, alpha));
}

FxValue lowerBmm(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("self");
  Value* y = a.tensor("mat2");
  requireRank(a, "self", x, 3);
  requireRank(a, "mat2", y, 3);
  return FxValue::of(cx.emit("matmul", {x, y}));
}

/// baddbmm(self, batch1, batch2, beta, alpha) = beta * self + alpha * (batch1 @ batch2).
FxValue lowerBaddbmm(Lowering& cx, NodeArgs& a) {
  Value* x = a.tensor("batch1");
  Value* y = a.tensor("batch2");
  requireRank(a, "batch1", x, 3);
  requireRank(a, "batch2", y, 3);
  Value* product = cx.emit("matmul", {x, y});
  return FxValue::of(addScaled(cx, a.tensor("self"), product, a.real("beta"), a.real("alpha")));
}

/// matmul / mv / dot: torch.matmul semantics, which Kiln's matmul has.
FxValue lowerMatmul(Lowering& cx, NodeArgs& a) {
  const char* rhs = a.has("other") ? "other" : a.has("vec") ? "vec" : "tensor";
  return FxValue::of(cx.emit("matmul", {a.tensor("self"), a.tensor(rhs)}));
}

/// outer(self, vec2) / ger: [n] x [m] -> [n, m] as a broadcast product in the
/// promoted dtype (rotary position tables).
FxValue lowerOuter(Lowering& cx, NodeArgs& a) {
  const char* rhs = a.has("vec2") ? "vec2" : "other";
  Value* x = a.tensor("self");
  Value* y = a.tensor(rhs);
  requireRank(a, "self", x, 1);
  requireRank(a, rhs, y, 1);
  Operand ops[] = {{x, {}}, {y, {}}};
  const DType t = resultType(ops);
  x = cx.emit("reshape", {cx.cast(x, t)}, {{"shape", Shape{x->shape()[0], 1}}});
  y = cx.emit("reshape", {cx.cast(y, t)}, {{"shape", Shape{1, y->shape()[0]}}});
  return FxValue::of(cx.emit("mul", {x, y}));
}

FxValue lowerLinear(Lowering& cx, NodeArgs& a) {
  std::vector<Value*> in = {a.tensor("input"), a.tensor("weight")};
  if (Value* b = a.optTensor("bias")) in.push_back(b);
  return FxValue::of(cx.emit("linear", in));
}

/// einsum(equation, tensors, path=None): the shared decomposition (matmuls).
FxValue lowerEinsum(Lowering& cx, NodeArgs& a) {
  return FxValue::of(decomp::einsum(cx, a.str("equation"), a.tensors("tensors")));
}

constexpr FxRule kRules[] = {
    {"aten.mm.default", lowerMm},
    {"aten.addmm.default", lowerAddmm},
    {"aten.bmm.default", lowerBmm},
    {"aten.einsum.default", lowerEinsum},
    {"aten.baddbmm.default", lowerBaddbmm},
    {"aten.matmul.default", lowerMatmul},
    {"aten.mv.default", lowerMatmul},
    {"aten.dot.default", lowerMatmul},
    {"aten.outer.default", lowerOuter},
    {"aten.ger.default", lowerOuter},
    {"aten.linear.default", lowerLinear},
};

}  // namespace

std::span<const FxRule> linalgRules() { return kRules; }

}  // namespace kiln::fx
