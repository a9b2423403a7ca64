// Gradient rules for the linalg family (see core/grad.h).
//
// matmul follows torch.matmul's cases: a 1-D operand was promoted to a
// matrix and the added dim removed, so its gradient is a matrix-vector
// product or an outer product; batched operands get g @ b^T and a^T @ g,
// summed over the batch dims broadcasting added. Where one operand is a
// plain matrix and the other is batched (x[B, T, k] @ W[k, p], the common
// case), the matrix's gradient folds the batch into the contraction and is
// one GEMM, not a batched product followed by a sum.
//
// linear (x[*, in] @ W[out, in]^T + b): dx = g @ W; dW = g2^T @ x2 with the
// leading dims flattened (one GEMM); db = g summed over the leading dims.
// Transposes are `permute` nodes; matmul has no transpose flags (the
// fold_transposes pass moves them into gemm's flags later, on targets with
// gemm kernels).
//
// gemm (op(a) @ op(b), op = transpose where flagged): each gradient is one
// gemm with flags, never a permute: da = g op(b)^T, or op(b) g^T when a is
// stored transposed; db = op(a)^T g, or g^T op(a) when b is; summed over
// broadcast batch dims.
#include <numeric>

#include "core/grad.h"
#include "core/ops/op_helpers.h"

namespace kiln {
namespace {

Value* reshapeTo(GradContext& c, Value* v, const Shape& s) {
  if (v->shape() == s) return v;
  return c.op("reshape", {v}, {{"shape", std::vector<int64_t>(s.begin(), s.end())}});
}

/// Swap the last two dims.
Value* transpose(GradContext& c, Value* v) {
  std::vector<int64_t> dims(v->shape().size());
  std::iota(dims.begin(), dims.end(), int64_t{0});
  std::swap(dims[dims.size() - 2], dims.back());
  return c.op("permute", {v}, {{"dims", dims}});
}

/// Permutation of `rank` dims that moves dim `d` to the front, keeping the others' order.
std::vector<int64_t> moveToFront(size_t rank, size_t d) {
  std::vector<int64_t> dims{static_cast<int64_t>(d)};
  for (size_t i = 0; i < rank; ++i)
    if (i != d) dims.push_back(static_cast<int64_t>(i));
  return dims;
}

/// Product of all sizes of `s` but dim `d` (exact with zero-size dims too).
int64_t numelExcept(const Shape& s, size_t d) {
  int64_t n = 1;
  for (size_t i = 0; i < s.size(); ++i)
    if (i != d) n *= s[i];
  return n;
}

/// `v` [..., c] as the matrix [numel / c, c] (a vector becomes one row).
Value* flattenRows(GradContext& c, Value* v) {
  const Shape& s = v->shape();
  return reshapeTo(c, v, {numelExcept(s, s.size() - 1), s.back()});
}

/// The gradient of the 2-D operand `w` of a product with a batched `x`:
/// sum over the batch of (x_i^T @ g_i) when w is on the right (x @ w), or of
/// (g_i @ x_i^T) when w is on the left (w @ x). The batch goes into the
/// contraction: right: x2[B*m, k]^T @ g2[B*m, p]; left: g' [m, B*p] @ x' [B*p, k].
Value* matrixGrad(GradContext& c, Value* x, Value* g, bool w_on_right) {
  if (w_on_right) return c.op("matmul", {transpose(c, flattenRows(c, x)), flattenRows(c, g)});
  // Left: move m to the front of g ([batch, m, p] -> [m, batch, p]) and put p
  // before k in x ([batch, k, p] -> [batch, p, k]).
  const size_t r = g->shape().size();
  Value* gp = c.op("permute", {g}, {{"dims", moveToFront(r, r - 2)}});
  gp = reshapeTo(c, gp, {g->shape()[r - 2], numelExcept(g->shape(), r - 2)});
  return c.op("matmul", {gp, flattenRows(c, transpose(c, x))});
}

void matmulGrad(GradContext& c) {
  Value *a = c.in(0), *b = c.in(1), *g = c.grad();
  const Shape &as = a->shape(), &bs = b->shape(), &gs = g->shape();
  if (as.size() == 1 && bs.size() == 1) {  // dot product: g is 0-d
    if (c.needs(0)) c.setGrad(0, c.op("mul", {g, b}));
    if (c.needs(1)) c.setGrad(1, c.op("mul", {g, a}));
    return;
  }
  if (bs.size() == 1) {  // [..., m, k] @ [k] -> [..., m]
    Shape col = gs;
    col.push_back(1);
    if (c.needs(0)) c.setGrad(0, c.op("mul", {reshapeTo(c, g, col), b}));  // outer products g_i b^T
    if (c.needs(1)) {                                                      // sum over rows: g_flat @ a_flat
      Value* a2 = flattenRows(c, a);
      c.setGrad(1, c.op("matmul", {reshapeTo(c, g, {a2->shape()[0]}), a2}));
    }
    return;
  }
  if (as.size() == 1) {  // [k] @ [..., k, p] -> [..., p]
    if (c.needs(0)) {    // sum over the batch of b_i @ g_i: [k, batch * p] @ [batch * p]
      Value* bk = bs.size() == 2 ? b : c.op("permute", {b}, {{"dims", moveToFront(bs.size(), bs.size() - 2)}});
      bk = reshapeTo(c, bk, {as[0], numelExcept(bs, bs.size() - 2)});
      c.setGrad(0, c.op("matmul", {bk, reshapeTo(c, g, {g->type().numel()})}));
    }
    if (c.needs(1)) {
      Shape row(gs.begin(), gs.end() - 1);
      row.push_back(1);
      row.push_back(gs.back());
      c.setGrad(1, c.op("mul", {reshapeTo(c, a, {as[0], 1}), reshapeTo(c, g, row)}));  // outer products a g_i^T
    }
    return;
  }
  if (c.needs(0)) {
    if (as.size() == 2 && bs.size() > 2)
      c.setGrad(0, matrixGrad(c, b, g, false));
    else
      c.setGradBroadcast(0, c.op("matmul", {g, transpose(c, b)}));
  }
  if (c.needs(1)) {
    if (bs.size() == 2 && as.size() > 2)
      c.setGrad(1, matrixGrad(c, a, g, true));
    else
      c.setGradBroadcast(1, c.op("matmul", {transpose(c, a), g}));
  }
}

void linearGrad(GradContext& c) {
  if (c.node().s("activation") != "none" || c.node().i("residual") != 0)
    opFail(c.node(), "a linear with a fused epilogue has no gradient rule: the fuse pass runs after autodiff");
  Value *x = c.in(0), *w = c.in(1), *g = c.grad();
  if (c.needs(0)) c.setGrad(0, c.op("matmul", {g, w}));
  if (c.needs(1)) {
    c.setGrad(1, c.op("matmul", {transpose(c, flattenRows(c, g)), flattenRows(c, x)}));
  }
  if (c.numInputs() == 3 && c.needs(2)) {
    std::vector<int64_t> lead(g->shape().size() - 1);
    std::iota(lead.begin(), lead.end(), int64_t{0});
    c.setGrad(2, lead.empty() ? g : c.op("sum", {g}, {{"dims", lead}}));
  }
}

Value* gemmOf(GradContext& c, Value* a, Value* b, bool ta, bool tb) {
  return c.op("gemm", {a, b}, {{"trans_a", int64_t{ta}}, {"trans_b", int64_t{tb}}});
}

void gemmGrad(GradContext& c) {
  Value *a = c.in(0), *b = c.in(1), *g = c.grad();
  const bool ta = c.node().i("trans_a") != 0, tb = c.node().i("trans_b") != 0;
  if (c.needs(0)) c.setGradBroadcast(0, ta ? gemmOf(c, b, g, tb, true) : gemmOf(c, g, b, false, !tb));
  if (c.needs(1)) c.setGradBroadcast(1, tb ? gemmOf(c, g, a, true, ta) : gemmOf(c, a, g, !ta, false));
}

}  // namespace

void registerLinalgGrads(OpTable& t) {
  t.setGrad("gemm", gemmGrad);
  t.setGrad("matmul", matmulGrad);
  t.setGrad("linear", linearGrad);
}

}  // namespace kiln
