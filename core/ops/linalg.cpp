// Matrix products: `matmul` with torch.matmul semantics (1-D operands are
// promoted and the added dim removed, batch dims broadcast), `linear`
// (y = x W^T + b), the form GEMM + bias epilogues want, and `gemm`, a matmul
// of matrices (rank >= 2) whose operands may be stored transposed: the
// fold_transposes pass makes it from matmul(permute(a), b) so that BLAS
// reads the transpose instead of a copy being made.
#include "core/ops/op_helpers.h"

namespace kiln {
namespace {

/// Floating inputs of one dtype (`except`, linear's residual, is checked by its rule).
void requireFloat(const Node& n, const Value* except = nullptr) {
  for (Value* v : n.inputs())
    if (!isFloating(v->dtype())) opFail(n, "needs floating-point inputs, got " + v->type().str());
  for (Value* v : n.inputs())
    if (v != except && v->dtype() != n.input(0)->dtype())
      opFail(n, "inputs have different dtypes: " + n.input(0)->type().str() + " and " + v->type().str());
}

std::vector<TensorType> inferMatmul(const Node& n) {
  requireFloat(n);
  Shape a = n.input(0)->shape(), b = n.input(1)->shape();
  if (a.empty() || b.empty()) opFail(n, "operands must have at least 1 dim");
  bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) a.insert(a.begin(), 1);
  if (b_vec) b.push_back(1);
  int64_t m = a[a.size() - 2], k = a.back(), k2 = b[b.size() - 2], p = b.back();
  if (k != k2)
    opFail(n, "inner dimensions differ: " + n.input(0)->type().str() + " @ " + n.input(1)->type().str());
  Shape batch = broadcastShapes(n, Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  Shape out = batch;
  if (!a_vec) out.push_back(m);
  if (!b_vec) out.push_back(p);
  return {{n.input(0)->dtype(), out}};
}

/// gemm's [rows, cols] of operand `i` as the product sees it (after its flag).
std::pair<int64_t, int64_t> gemmOperand(const Node& n, size_t i) {
  const Shape& s = n.input(i)->shape();
  const bool t = n.i(i == 0 ? "trans_a" : "trans_b") != 0;
  return t ? std::pair{s.back(), s[s.size() - 2]} : std::pair{s[s.size() - 2], s.back()};
}

std::vector<TensorType> inferGemm(const Node& n) {
  requireFloat(n);
  const Shape &a = n.input(0)->shape(), &b = n.input(1)->shape();
  if (a.size() < 2 || b.size() < 2)
    opFail(n, "operands must be matrices (rank >= 2), got " + n.input(0)->type().str() + " and " +
                  n.input(1)->type().str());
  for (const char* flag : {"trans_a", "trans_b"})
    if (n.i(flag) != 0 && n.i(flag) != 1) opFail(n, std::string(flag) + " must be 0 or 1");
  const auto [m, k] = gemmOperand(n, 0);
  const auto [k2, p] = gemmOperand(n, 1);
  if (k != k2)
    opFail(n, "inner dimensions differ: " + n.input(0)->type().str() + (n.i("trans_a") ? "^T" : "") + " @ " +
                  n.input(1)->type().str() + (n.i("trans_b") ? "^T" : ""));
  Shape out = broadcastShapes(n, Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  out.push_back(m);
  out.push_back(p);
  return {{n.input(0)->dtype(), out}};
}

Cost gemmCost(const Node& n) {
  return {2.0 * static_cast<double>(gemmOperand(n, 0).second) * static_cast<double>(n.output()->type().numel()),
          ioBytes(n)};
}

Cost matmulCost(const Node& n) {
  const Shape& a = n.input(0)->shape();
  double k = static_cast<double>(a.back());
  return {2.0 * k * static_cast<double>(n.output()->type().numel()), ioBytes(n)};
}

std::vector<TensorType> inferLinear(const Node& n) {
  requireFloat(n, n.i("residual") != 0 && n.numInputs() > 2 ? linearResidual(n) : nullptr);
  const Shape& x = n.input(0)->shape();
  const Shape& w = n.input(1)->shape();
  if (w.size() != 2 || x.empty() || x.back() != w[1])
    opFail(n, "input " + n.input(0)->type().str() + " does not match weight " + n.input(1)->type().str());
  if (const std::string& a = n.s("activation"); a != "none" && a != "relu")
    opFail(n, "activation must be \"none\" or \"relu\" (the fused epilogues), got \"" + a + "\"");
  const Value* residual = n.i("residual") != 0 ? (n.numInputs() > 2 ? linearResidual(n) : nullptr) : nullptr;
  if (n.i("residual") != 0 && !residual) opFail(n, "residual=1 needs the residual as the last input");
  if (!residual && n.numInputs() > 3) opFail(n, "4 inputs need residual=1 (x, weight, bias, residual)");
  const Value* bias = linearBias(n);
  if (bias && bias->shape() != Shape{w[0]})
    opFail(n, "bias " + bias->type().str() + " does not match weight " + n.input(1)->type().str());
  Shape out = x;
  out.back() = w[0];
  if (!residual) return {{n.input(0)->dtype(), out}};
  // The epilogue adds the residual in the add's type: the GEMM's own dtype,
  // or f32 for a bf16/f16 GEMM added to an f32 stream (amp's residuals).
  const DType r = residual->dtype(), t = n.input(0)->dtype();
  if (residual->shape() != out || !(r == t || (r == DType::F32 && isLowPrecisionFloat(t))))
    opFail(n, "residual " + residual->type().str() + " must be the output's shape " + shapeStr(out) +
                  ", in its dtype " + std::string(dtypeName(t)) + (isLowPrecisionFloat(t) ? " or f32" : ""));
  return {{r, out}};
}

Cost linearCost(const Node& n) {
  double k = static_cast<double>(n.input(1)->shape()[1]);
  return {2.0 * k * static_cast<double>(n.output()->type().numel()), ioBytes(n)};
}

}  // namespace

void registerLinalgOps(OpTable& t) {
  t.add({"matmul", "torch.matmul (batched, broadcasting)", 2, 2, 0, {}, inferMatmul, matmulCost});
  t.add({"gemm", "op(a) @ op(b) of matrices (batch dims broadcast), op(x) = x^T where trans_a / trans_b is 1", 2, 2,
         0, {optAttr("trans_a", int64_t{0}), optAttr("trans_b", int64_t{0})}, inferGemm, gemmCost});
  // `activation` and `residual` are epilogues the fuse pass sets
  // (relu(linear(...)) -> linear {activation="relu"}; add(linear(...), r) ->
  // linear(..., r) {residual=1}): applied to the GEMM's output in the same
  // kernel, in one chunked pass instead of a node of their own.
  t.add({"linear", "x @ weight^T + bias (bias optional), then the activation and residual epilogues", 2, 4, 0,
         {optAttr("activation", std::string("none")), optAttr("residual", int64_t{0})}, inferLinear, linearCost});
}

}  // namespace kiln
