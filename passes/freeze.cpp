// freeze: removes the backward and optimizer work of frozen parameters.
//
// Needs: autodiff has run (Gradient outputs), and usually the optimizer
// too (one multi-tensor sgd_update / adam_update node, core/ops/optim.cpp);
// ctx.training.frozen names Param inputs. Autodiff differentiates every
// parameter, so freezing is one place that sees the gradient, the update and
// the optimizer state together.
// Does: drops the frozen parameters' Gradient outputs; rebuilds every
// update node without their groups (parameter, gradient, state) and every
// global_norm without their gradients, as clip_grad_norm_ skips parameters
// whose .grad is None; drops their ParamUpdate / OptStateUpdate outputs; then
// erases the nodes that only fed what was dropped (walking back from it, so
// nodes that were dead before stay for dce to count), and the OptState inputs
// nothing reads any more, so checkpoints carry no state for them.
// Guarantees: a frozen parameter stays a Param input (the forward reads it)
// with no update output, so a training session carries its value unchanged;
// the others are updated exactly as if the frozen ones had requires_grad =
// False (the same nodes on the same values: bit for bit).
#include "passes/freeze.h"

#include <fnmatch.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "core/graph_cost.h"
#include "core/op_table.h"

namespace kiln {
namespace {

constexpr size_t kOptimizerScalars = 3;  // lr, step, grad_scale lead every update node

/// Inputs and outputs per parameter of a multi-tensor update node (the
/// layouts of core/ops/optim.cpp); zero for any other op.
struct GroupLayout {
  size_t inputs = 0, outputs = 0;
};

GroupLayout groupLayout(const Node& n) {
  if (n.is(Op::adam_update)) return {4, 3};  // p, g, m, v -> p, m, v
  if (n.is(Op::sgd_update)) return n.f("momentum") != 0 ? GroupLayout{3, 2} : GroupLayout{2, 1};  // p, g[, buf]
  return {};
}

/// What lost a reader while frozen entries were dropped: where to look for
/// newly dead nodes and unused optimizer state.
struct Dropped {
  std::vector<Node*> producers;
  std::vector<Value*> state_inputs;
  /// Gradient values of frozen parameters, with multiplicity (two
  /// parameters may share one gradient value).
  std::unordered_map<const Value*, int> frozen_grads;

  void lost(Value* v) {
    if (v->producer())
      producers.push_back(v->producer());
    else if (v->role() == ValueRole::OptState)
      state_inputs.push_back(v);
  }
};

/// Replace `old` by a node of the same op, attributes, scope and provenance
/// over `inputs`, at the same position.
Node* rebuild(Graph& g, Node* old, std::vector<Value*> inputs) {
  g.setInsertPoint(old);
  Node* n = g.create(old->op(), std::move(inputs), old->attrs(), old->scope(), old->provenance());
  g.setInsertPoint(nullptr);
  return n;
}

/// Rebuild update node `n` without the groups of frozen parameters.
void dropFrozenGroups(Graph& g, Node* n, GroupLayout layout, const std::set<std::string>& frozen, Dropped& d) {
  const size_t groups = (n->numInputs() - kOptimizerScalars) / layout.inputs;
  std::vector<bool> keep(groups);
  for (size_t i = 0; i < groups; ++i) {
    Value* p = n->input(kOptimizerScalars + i * layout.inputs);
    keep[i] = !(p->role() == ValueRole::Param && frozen.count(p->name()));
  }
  if (std::ranges::all_of(keep, [](bool k) { return k; })) return;
  if (std::ranges::none_of(keep, [](bool k) { return k; }))
    fail("freeze: every parameter " + n->describe() + " updates is frozen: nothing to train");

  std::vector<Value*> inputs(n->inputs().begin(), n->inputs().begin() + kOptimizerScalars);
  for (size_t i = 0; i < groups; ++i) {
    const size_t first = kOptimizerScalars + i * layout.inputs;
    for (size_t k = 0; k < layout.inputs; ++k) {
      Value* v = n->input(first + k);
      if (keep[i]) {
        inputs.push_back(v);
      } else if (k > 0) {  // the parameter itself stays: the forward reads it
        d.lost(v);
        if (k == 1) ++d.frozen_grads[v];
      }
    }
  }
  Node* m = rebuild(g, n, std::move(inputs));
  size_t next = 0;
  for (size_t i = 0; i < groups; ++i)
    for (size_t k = 0; k < layout.outputs; ++k) {
      Value* old = n->output(i * layout.outputs + k);
      if (keep[i])
        g.replaceAllUsesWith(old, m->output(next++));
      else if (!old->uses().empty())
        fail("freeze: the update of frozen parameter '" + n->input(kOptimizerScalars + i * layout.inputs)->name() +
             "' is read by " + old->uses().front().user->describe());
    }
  std::erase_if(g.mutableOutputs(), [&](const GraphOutput& o) { return o.value->producer() == n; });
  g.erase(n);
}

/// Rebuild every global_norm (gradient clipping) without frozen gradients.
void dropFrozenFromNorms(Graph& g, Dropped& d) {
  std::vector<Node*> norms;
  for (const auto& n : g.nodes())
    if (n->is(Op::global_norm) &&
        std::ranges::any_of(n->inputs(), [&](Value* v) { return d.frozen_grads.count(v) != 0; }))
      norms.push_back(n.get());
  for (Node* n : norms) {
    auto left = d.frozen_grads;
    std::vector<Value*> inputs;
    for (Value* v : n->inputs()) {
      auto it = left.find(v);
      if (it != left.end() && it->second > 0) {
        --it->second;
        d.lost(v);
      } else {
        inputs.push_back(v);
      }
    }
    if (inputs.empty()) fail("freeze: " + n->describe() + " reads only frozen gradients: nothing to train");
    Node* m = rebuild(g, n, std::move(inputs));
    g.replaceAllUsesWith(n->output(), m->output());
    g.erase(n);
  }
}

/// Erase the nodes in `work` that nothing reads any more, and transitively
/// the producers of their inputs; collects OptState inputs that lost a reader.
void eraseNewlyDead(Graph& g, Dropped& d) {
  std::unordered_set<const Value*> outputs;
  for (const GraphOutput& o : g.outputs()) outputs.insert(o.value);
  std::unordered_set<const Node*> erased;  // compared, never dereferenced
  std::vector<Node*> work = std::move(d.producers);
  while (!work.empty()) {
    Node* n = work.back();
    work.pop_back();
    if (erased.count(n) || n->def().has(kSideEffect)) continue;
    bool live = false;
    for (Value* o : n->outputs()) live = live || !o->uses().empty() || outputs.count(o);
    if (live) continue;
    std::vector<Value*> inputs(n->inputs().begin(), n->inputs().end());
    erased.insert(n);
    g.erase(n);
    for (Value* v : inputs) {
      if (v->producer())
        work.push_back(v->producer());
      else if (v->role() == ValueRole::OptState)
        d.state_inputs.push_back(v);
    }
  }
}

bool hasWildcard(std::string_view p) {
  return p.find_first_of("*?[") != std::string_view::npos;
}

}  // namespace

bool freezePatternMatches(std::string_view pattern, std::string_view name) {
  if (hasWildcard(pattern)) return fnmatch(std::string(pattern).c_str(), std::string(name).c_str(), 0) == 0;
  if (name == pattern) return true;
  return name.size() > pattern.size() && name.substr(0, pattern.size()) == pattern && name[pattern.size()] == '.';
}

Result<std::set<std::string>> resolveFreezePatterns(const std::vector<std::string>& patterns,
                                                    const std::vector<std::string>& params,
                                                    const std::map<std::string, std::string>& aliases) {
  std::set<std::string> frozen;
  for (const std::string& pat : patterns) {
    if (pat.empty()) return Error{"--freeze: empty pattern"};
    bool any = false;
    for (const std::string& p : params)
      if (freezePatternMatches(pat, p)) {
        frozen.insert(p);
        any = true;
      }
    for (const auto& [alias, target] : aliases)
      if (freezePatternMatches(pat, alias) && std::ranges::find(params, target) != params.end()) {
        frozen.insert(target);
        any = true;
      }
    if (any) continue;
    std::string some;
    for (size_t i = 0; i < params.size() && i < 4; ++i) some += (i ? ", " : "") + params[i];
    if (params.size() > 4) some += ", ... (" + std::to_string(params.size()) + " in all)";
    return Error{"--freeze '" + pat + "' matches no parameter (parameters: " + (some.empty() ? "none" : some) +
                 "; a name without * ? [ selects itself or a module prefix)"};
  }
  return frozen;
}

Result<PassResult> runFreeze(Graph& g, PassContext& ctx) {
  return catchErrors([&]() -> PassResult {
    const std::set<std::string>& frozen = ctx.training.frozen;
    PassResult r;
    r.statistics = {{"params_frozen", 0}, {"nodes_removed", 0}, {"flops_removed", 0}};
    if (frozen.empty()) return r;
    for (const std::string& name : frozen) {
      const Value* v = g.findInput(name);
      if (!v || v->role() != ValueRole::Param) fail("freeze: the graph has no parameter '" + name + "'");
    }
    const bool trains = std::ranges::any_of(g.outputs(), [](const GraphOutput& o) {
      return o.role == OutputRole::Gradient || o.role == OutputRole::ParamUpdate;
    });
    if (!trains) fail("freeze: the graph has no Gradient or ParamUpdate outputs yet; run it after autodiff");

    const size_t nodes_before = g.numNodes();
    const double flops_before = graphFlops(g);
    const size_t outputs_before = g.outputs().size();
    Dropped d;
    std::erase_if(g.mutableOutputs(), [&](const GraphOutput& o) {
      if (o.role != OutputRole::Gradient || !frozen.count(o.name)) return false;
      d.lost(o.value);
      return true;
    });
    std::vector<std::pair<Node*, GroupLayout>> updates;
    for (const auto& n : g.nodes())
      if (GroupLayout l = groupLayout(*n); l.inputs) updates.emplace_back(n.get(), l);
    for (auto [n, layout] : updates) dropFrozenGroups(g, n, layout, frozen, d);
    dropFrozenFromNorms(g, d);
    eraseNewlyDead(g, d);

    size_t state_removed = 0;
    std::unordered_set<const Value*> seen;
    for (Value* v : d.state_inputs) {
      if (!seen.insert(v).second || !v->uses().empty()) continue;
      if (std::ranges::any_of(g.outputs(), [&](const GraphOutput& o) { return o.value == v; })) continue;
      g.removeInput(v);
      ++state_removed;
    }

    r.changed = g.numNodes() != nodes_before || g.outputs().size() != outputs_before;
    r.statistics["params_frozen"] = static_cast<double>(frozen.size());
    r.statistics["nodes_removed"] = static_cast<double>(nodes_before - g.numNodes());
    r.statistics["flops_removed"] = flops_before - graphFlops(g);
    r.statistics["opt_state_removed"] = static_cast<double>(state_removed);
    return r;
  });
}

}  // namespace kiln
