// split_updates (see split_updates.h for what it does, needs and guarantees).
#include "passes/split_updates.h"

#include <unordered_set>

namespace kiln {
namespace {

constexpr size_t kScalars = 3;  // lr, step, grad_scale (core/ops/optim.cpp)

/// Inputs per parameter group and outputs per group of an update node.
std::pair<size_t, size_t> groupSizes(const Node& n) {
  if (n.is(Op::adam_update)) return {4, 3};
  const bool momentum = n.f("momentum") != 0;
  return {momentum ? 3 : 2, momentum ? 2 : 1};
}

/// Whether any of `roots` is computed (transitively) from one of `targets`.
bool dependsOn(std::span<Value* const> roots, const std::unordered_set<const Value*>& targets) {
  std::unordered_set<const Node*> seen;
  std::vector<const Value*> stack(roots.begin(), roots.end());
  while (!stack.empty()) {
    const Value* v = stack.back();
    stack.pop_back();
    if (targets.count(v)) return true;
    const Node* p = v->producer();
    if (!p || !seen.insert(p).second) continue;
    for (const Value* in : p->inputs()) stack.push_back(in);
  }
  return false;
}

}  // namespace

Result<PassResult> runSplitUpdates(Graph& g, PassContext&) {
  return catchErrors([&]() -> PassResult {
    std::vector<Node*> updates;
    for (const auto& n : g.nodes())
      if (n->is(Op::adam_update) || n->is(Op::sgd_update)) updates.push_back(n.get());
    PassResult r;
    double split = 0, made = 0, kept = 0;
    for (Node* u : updates) {
      const auto [per, out_per] = groupSizes(*u);
      const size_t groups = (u->numInputs() - kScalars) / per;
      if (groups < 2) continue;
      std::unordered_set<const Value*> grads;
      for (size_t k = 0; k < groups; ++k) grads.insert(u->input(kScalars + k * per + 1));
      if (dependsOn(u->inputs().subspan(0, kScalars), grads)) {
        ++kept;
        continue;
      }
      g.setInsertPoint(u);
      for (size_t k = 0; k < groups; ++k) {
        std::vector<Value*> inputs(u->inputs().begin(), u->inputs().begin() + kScalars);
        for (size_t j = 0; j < per; ++j) inputs.push_back(u->input(kScalars + k * per + j));
        Node* one = g.create(u->op(), inputs, u->attrs(), u->scope(), u->provenance());
        for (size_t j = 0; j < out_per; ++j) g.replaceAllUsesWith(u->output(k * out_per + j), one->output(j));
        ++made;
      }
      g.setInsertPoint(nullptr);
      g.erase(u);
      ++split;
    }
    r.changed = split > 0;
    r.statistics = {{"updates_split", split}, {"update_nodes", made}, {"kept_multi_tensor", kept}};
    return r;
  });
}

}  // namespace kiln
