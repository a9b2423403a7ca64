// eval_mode: turns a forward traced in training mode into the same model
// after model.eval().
//
// Needs: an imported forward graph (before loss). Does: every training-mode
// batch_norm whose running statistics are tracked (its new-statistics
// outputs are BufferUpdate graph outputs) becomes an eval-mode batch_norm on
// the same inputs, normalizing with the running statistics, and those
// BufferUpdate outputs go; a BatchNorm without running statistics
// (track_running_stats=False) keeps normalizing with the batch's, as it does
// in PyTorch's eval mode. Every training-mode dropout is replaced by its
// input. Guarantees: no BufferUpdate output is left (evaluation changes no
// state) and no dropout is left; what fed only the switched nodes is left
// for dce.
#include "passes/eval_mode.h"

#include <algorithm>
#include <vector>


namespace kiln {
namespace {

bool isBufferUpdate(const Graph& g, const Value* v) {
  return std::ranges::any_of(
      g.outputs(), [&](const GraphOutput& o) { return o.value == v && o.role == OutputRole::BufferUpdate; });
}

}  // namespace

Result<PassResult> runEvalMode(Graph& g, PassContext&) {
  return catchErrors([&]() -> PassResult {
    size_t batch_norms = 0, dropouts = 0;
    std::vector<Node*> switched;
    std::vector<Node*> targets;
    for (const auto& n : g.nodes())
      if ((n->is(Op::batch_norm) || n->is(Op::dropout)) && n->i("training")) targets.push_back(n.get());
    for (Node* n : targets) {
      if (n->is(Op::dropout)) {
        g.replaceAllUsesWith(n->output(0), n->input(0));
        ++dropouts;
        switched.push_back(n);
        continue;
      }
      if (!isBufferUpdate(g, n->output(1)) && !isBufferUpdate(g, n->output(2))) continue;  // batch statistics only
      g.setInsertPoint(n);
      AttrMap attrs = n->attrs();
      attrs.erase("training");  // the default: eval mode
      std::vector<Value*> inputs(n->inputs().begin(), n->inputs().end());
      Node* eval = g.create("batch_norm", std::move(inputs), std::move(attrs), n->scope(), n->provenance());
      g.replaceAllUsesWith(n->output(0), eval->output(0));
      ++batch_norms;
      switched.push_back(n);
    }
    g.setInsertPoint(nullptr);
    std::erase_if(g.mutableOutputs(), [](const GraphOutput& o) { return o.role == OutputRole::BufferUpdate; });
    for (Node* n : switched) g.erase(n);  // the forward reads nothing of them now (dce takes what fed only them)
    PassResult r;
    r.changed = batch_norms + dropouts > 0;
    r.statistics["batch_norms"] = static_cast<double>(batch_norms);
    r.statistics["dropouts"] = static_cast<double>(dropouts);
    return r;
  });
}

}  // namespace kiln
