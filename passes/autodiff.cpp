// autodiff: reverse-mode differentiation from the per-op gradient rules.
//
// Needs: a verified forward graph whose Loss output is a 0-d float value.
// Does: marks the values that depend on a parameter (forward sweep) and the
// values the loss depends on (backward sweep); walks the nodes on both, in
// reverse order, calling each op's GradFn (core/ops/*_grad.cpp) with the
// gradients of its outputs; sums gradients of values used more than once
// (fan-out, tied parameters). New nodes are appended after the forward and
// keep the forward node's scope, with provenance "grad of <op @scope>".
// Guarantees: the graph stays verified; every differentiated parameter has a
// Gradient output; nothing is computed for unused parameters. Frozen
// parameters are differentiated too: the freeze pass removes that work.
#include "passes/autodiff.h"

#include <unordered_map>
#include <unordered_set>

#include "core/grad.h"
#include "core/op_table.h"
#include "passes/amp.h"

namespace kiln {

Result<std::vector<Value*>> differentiate(Graph& g, Value* loss, const std::vector<Value*>& wrt, Value* seed) {
  return catchErrors([&]() -> std::vector<Value*> {
    if (!loss) fail("autodiff: the graph has no loss");
    if (!loss->shape().empty() || !isDifferentiable(loss->dtype()))
      fail("autodiff: the loss must be a 0-d floating tensor, got " + loss->type().str());

    // Forward sweep: values that depend on something we differentiate.
    std::unordered_set<const Value*> active;
    for (Value* v : wrt)
      if (isDifferentiable(v->dtype())) active.insert(v);
    for (const auto& n : g.nodes()) {
      bool any = false;
      for (Value* v : n->inputs()) any = any || active.count(v);
      if (!any || !n->def().no_grad_reason.empty()) continue;
      for (Value* o : n->outputs())
        if (isDifferentiable(o->dtype())) active.insert(o);
    }
    // Backward sweep: values the loss depends on.
    std::unordered_set<const Value*> reaches{loss};
    std::vector<Node*> relevant;
    for (auto it = g.nodes().rbegin(); it != g.nodes().rend(); ++it) {
      Node* n = it->get();
      bool feeds = false, depends = false;
      for (Value* o : n->outputs()) {
        feeds = feeds || reaches.count(o);
        depends = depends || active.count(o);
      }
      if (!feeds) continue;
      for (Value* v : n->inputs()) reaches.insert(v);
      if (depends) relevant.push_back(n);
    }

    std::unordered_map<const Value*, Value*> grads;
    g.setInsertPoint(nullptr);
    auto accumulate = [&](Value* v, Value* gv, const Node& at) {
      auto [it, inserted] = grads.emplace(v, gv);
      if (!inserted)
        it->second = g.add("add", {it->second, gv}, {}, at.scope(), "grad accumulation");
    };
    if (seed && seed->dtype() != loss->dtype())
      seed = g.add("cast", {seed}, {{"dtype", loss->dtype()}}, {}, "grad seed");
    grads[loss] = seed ? seed
                       : g.add("full", {}, {{"shape", std::vector<int64_t>{}}, {"value", 1.0}, {"dtype", loss->dtype()}},
                               {}, "grad seed");

    for (Node* n : relevant) {  // already in reverse order
      std::vector<Value*> out_grads;
      bool any = false;
      for (Value* o : n->outputs()) {
        auto it = grads.find(o);
        out_grads.push_back(it == grads.end() ? nullptr : it->second);
        any = any || out_grads.back();
      }
      if (!any) continue;
      const OpDef& def = n->def();
      if (!def.grad)
        fail("autodiff: op '" + def.name + "' has no gradient rule (" + n->describe() +
             "); `kiln ops` lists which ops can be trained through");
      std::vector<bool> needs;
      for (Value* v : n->inputs()) needs.push_back(active.count(v) && isDifferentiable(v->dtype()));
      GradContext ctx(g, *n, std::move(out_grads), std::move(needs));
      def.grad(ctx);
      for (size_t i = 0; i < n->numInputs(); ++i)
        if (Value* gi = ctx.inputGrads()[i]) accumulate(n->input(i), gi, *n);
    }

    std::vector<Value*> result;
    for (Value* v : wrt) {
      auto it = grads.find(v);
      result.push_back(it == grads.end() ? nullptr : it->second);
    }
    return result;
  });
}

Result<PassResult> runAutodiff(Graph& g, PassContext&) {
  Value* loss = nullptr;
  for (const GraphOutput& o : g.outputs())
    if (o.role == OutputRole::Loss) {
      if (loss) return Error{"autodiff: the graph has more than one loss output"};
      loss = o.value;
    }
  std::vector<Value*> params;
  for (Value* v : g.inputs())
    if (v->role() == ValueRole::Param && isDifferentiable(v->dtype()))
      params.push_back(v);
  // fp16 loss scaling (passes/amp.h): the backward starts from the scale.
  Value* seed = nullptr;
  for (const GraphOutput& o : g.outputs())
    if (o.role == OutputRole::Metric && o.name == kLossScaleMetric) seed = o.value;
  size_t before = g.numNodes();
  auto grads = differentiate(g, loss, params, seed);
  if (!grads) return grads.error();
  PassResult r;
  double with = 0;
  for (size_t i = 0; i < params.size(); ++i)
    if (Value* gv = (*grads)[i]) {
      g.addOutput(gv, params[i]->name(), OutputRole::Gradient);
      ++with;
    }
  r.changed = g.numNodes() != before;
  r.statistics["nodes_added"] = static_cast<double>(g.numNodes() - before);
  r.statistics["params_with_grad"] = with;
  r.statistics["params_without_grad"] = static_cast<double>(params.size()) - with;
  return r;
}

}  // namespace kiln
