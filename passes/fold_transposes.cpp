// The fold_transposes pass.
//
// Needs: a target with `gemm` kernels (the CPU's BLAS and oneDNN ones, and
// CUDA's cuBLASLt and cuBLAS ones take the transpose flags). Runs after
// simplify, which has already cancelled pairs of permutes, and before fuse.
// Does: a matmul of two matrices (both operands rank >= 2) or a gemm, one of
// whose operands is a permute that swaps the last two dims and keeps the
// others, becomes gemm(a, b) {trans_a, trans_b} on the permute's input with
// that operand's flag flipped. A permute nothing else reads goes (dce).
// Why: a permute is a copy (Kiln's tensors are dense), and autodiff writes
// every linear's weight gradient as matmul(permute(g2), x2), where g2 is the
// [tokens, out] output gradient: for a GPT-2-style vocabulary projection a
// 131 MB copy per step (98 ms here) that BLAS and oneDNN read transposed at
// the speed of the plain product; on a GPU (GPT-2 small at 8 x 1024 tokens)
// the permute kernels were 15% of the bf16 step.
// Guarantees: the same product; BLAS may order its sums differently for a
// transposed operand, so the values agree within float rounding.
#include "passes/fold_transposes.h"

#include <set>
#include <tuple>
#include <vector>

#include "core/ops/op_helpers.h"
#include "passes/dce.h"

namespace kiln {
namespace {

/// `v`'s producer when it is a permute of a rank >= 2 tensor that swaps the
/// last two dims and nothing else.
Node* lastTwoSwap(const Value* v) {
  Node* p = v->producer();
  if (!p || !p->is(Op::permute)) return nullptr;
  const auto& dims = p->is("dims");
  const int64_t r = static_cast<int64_t>(dims.size());
  if (r < 2) return nullptr;
  for (int64_t d = 0; d < r; ++d) {
    const int64_t want = d == r - 2 ? r - 1 : d == r - 1 ? r - 2 : d;
    if (normalizeAxis(dims[static_cast<size_t>(d)], r) != want) return nullptr;
  }
  return p;
}

}  // namespace

Result<PassResult> runFoldTransposes(Graph& g, PassContext& ctx) {
  PassResult res;
  std::vector<Node*> products;
  for (const auto& n : g.nodes())
    if (n->is(Op::matmul) || n->is(Op::gemm)) products.push_back(n.get());
  double folded = 0;
  std::set<Node*> permutes;
  for (Node* n : products) {
    Value *a = n->input(0), *b = n->input(1);
    if (a->type().rank() < 2 || b->type().rank() < 2) continue;  // matmul's vector cases stay
    const bool is_gemm = n->is(Op::gemm);
    int64_t ta = is_gemm ? n->i("trans_a") : 0, tb = is_gemm ? n->i("trans_b") : 0;
    Node* pa = lastTwoSwap(a);
    Node* pb = lastTwoSwap(b);
    if (!pa && !pb) continue;
    for (auto [p, v, t] : {std::tuple{pa, &a, &ta}, std::tuple{pb, &b, &tb}}) {
      if (!p) continue;
      *v = p->input(0);
      *t = 1 - *t;
      folded += 1;
      permutes.insert(p);
    }
    g.setInsertPoint(n);
    Value* y = g.add("gemm", {a, b}, {{"trans_a", ta}, {"trans_b", tb}}, n->scope(), n->provenance());
    g.replaceAllUsesWith(n->output(), y);
  }
  g.setInsertPoint(nullptr);
  // The copies that go: permutes nothing reads any more (dce removes them).
  std::set<const Value*> outs;
  for (const GraphOutput& o : g.outputs()) outs.insert(o.value);
  double bytes = 0;
  for (Node* p : permutes)
    if (p->output()->uses().empty() && !outs.count(p->output()))
      bytes += static_cast<double>(p->output()->type().bytes());
  if (folded > 0) {
    auto d = runDce(g, ctx);
    if (!d) return d.error();
  }
  res.changed = folded > 0;
  res.statistics = {{"folded", folded}, {"bytes_not_copied", bytes}};
  return res;
}

}  // namespace kiln
