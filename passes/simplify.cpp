// simplify: algebraic rules and constant folding to a fixed point, then CSE
// and DCE.
//
// Needs: any graph. Does: sweeps the nodes in order; on each node it first
// tries constant folding (foldNode, passes/fold.h), then the algebraic rules
// whose root op is the node's (passes/algebraic_rules.h), in table order. The
// first that applies replaces the node's outputs and erases it, so a rule
// never fires twice on one node and the sweep terminates. Sweeping in order
// means a node sees its inputs already simplified, so one sweep usually
// reaches the fixed point; sweeps repeat until nothing changes. Then cse
// merges what the rewrites made equal, and if it merged anything the rules get
// another round (two permutes of one x that became equal, say). Last, dce
// drops what the rewrites left unused.
// Guarantees: the outputs are the same values as before (bit for bit, except
// where a rule's comment says -0.0 may become +0.0); every rewrite keeps the
// node's output type; new nodes keep the scope and provenance of the node
// they replace. Statistics: "rule.<name>" per rule that fired, "folded",
// "cse_merged", "nodes_removed" (the net change in node count).
#include "passes/simplify.h"

#include <map>
#include <string>
#include <string_view>

#include "passes/algebraic_rules.h"
#include "passes/cse.h"
#include "passes/dce.h"
#include "passes/fold.h"

namespace kiln {
namespace {

/// A fixed point is normally reached in one or two sweeps; this bounds a rule
/// set that would keep rewriting (a bug) instead of looping forever.
constexpr int kMaxSweeps = 32;
constexpr int kMaxRounds = 4;

/// The rules by the op they are rooted at ("*": any op).
const std::map<std::string, std::vector<const AlgebraicRule*>, std::less<>>& rulesByOp() {
  static const auto table = [] {
    std::map<std::string, std::vector<const AlgebraicRule*>, std::less<>> m;
    for (const AlgebraicRule& r : algebraicRules()) m[r.op].push_back(&r);
    return m;
  }();
  return table;
}

/// Replace n's outputs by `repl` and erase n.
void replaceNode(Graph& g, Node* n, const std::vector<Value*>& repl) {
  for (size_t i = 0; i < repl.size(); ++i) g.replaceAllUsesWith(n->output(i), repl[i]);
  g.erase(n);
}

/// Try `rules` on `n`; returns the rule that rewrote it, or nullptr.
const AlgebraicRule* applyRules(Graph& g, Node* n, const std::vector<const AlgebraicRule*>& rules) {
  for (const AlgebraicRule* r : rules) {
    g.setInsertPoint(n);
    Value* v = r->rewrite(g, *n);
    g.setInsertPoint(nullptr);
    if (!v) continue;
    if (v->type() != n->output()->type())
      fail("simplify: rule " + std::string(r->name) + " changed the type of " + n->describe() + " from " +
           n->output()->type().str() + " to " + v->type().str());
    replaceNode(g, n, {v});
    return r;
  }
  return nullptr;
}

/// The rules rooted at n's op, then those for any op.
const AlgebraicRule* applyRules(Graph& g, Node* n) {
  if (n->numOutputs() != 1) return nullptr;
  static const std::vector<const AlgebraicRule*> none;
  auto it = rulesByOp().find(n->op());
  if (const AlgebraicRule* r = applyRules(g, n, it == rulesByOp().end() ? none : it->second)) return r;
  auto any = rulesByOp().find("*");
  return applyRules(g, n, any == rulesByOp().end() ? none : any->second);
}

/// One sweep over the graph in order; returns how many nodes were rewritten.
size_t sweep(Graph& g, std::map<std::string, double>& stats) {
  std::vector<Node*> order;
  for (const auto& n : g.nodes()) order.push_back(n.get());
  size_t rewrites = 0;
  // Only the visited node is erased (rules and foldNode insert before it and
  // erase nothing), so the rest of `order` stays valid.
  for (Node* n : order) {
    std::vector<Value*> folded = foldNode(g, *n);
    if (!folded.empty()) {
      replaceNode(g, n, folded);
      stats["folded"] += 1;
      ++rewrites;
      continue;
    }
    if (const AlgebraicRule* r = applyRules(g, n)) {
      stats["rule." + std::string(r->name)] += 1;
      ++rewrites;
    }
  }
  return rewrites;
}

}  // namespace

Result<PassResult> runSimplify(Graph& g, PassContext& ctx) {
  const size_t before = g.numNodes();
  PassResult result;
  std::map<std::string, double>& stats = result.statistics;
  size_t rewrites = 0;
  Result<Status> rewritten = catchErrors([&]() -> Status {
    for (int round = 0; round < kMaxRounds; ++round) {
      for (int sweeps = 0;; ++sweeps) {
        if (sweeps == kMaxSweeps) fail("simplify: no fixed point after " + std::to_string(kMaxSweeps) + " sweeps");
        const size_t n = sweep(g, stats);
        if (n == 0) break;
        rewrites += n;
      }
      Result<PassResult> cse = runCse(g, ctx);
      if (!cse.ok()) return cse.error();
      const double merged = cse->statistics["nodes_removed"];
      stats["cse_merged"] += merged;
      rewrites += static_cast<size_t>(merged);
      if (merged == 0) break;
    }
    return Status::Ok();
  });
  if (!rewritten.ok()) return rewritten.error();
  if (!rewritten->ok()) return rewritten->error();
  Result<PassResult> dce = runDce(g, ctx);
  if (!dce.ok()) return dce.error();
  result.changed = rewrites > 0 || dce->changed;
  stats["nodes_removed"] = static_cast<double>(before) - static_cast<double>(g.numNodes());
  return result;
}

}  // namespace kiln
