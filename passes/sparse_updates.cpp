// sparse_updates (see sparse_updates.h for what it does, needs and guarantees).
#include "passes/sparse_updates.h"

namespace kiln {
namespace {

constexpr size_t kScalars = 3;  // lr, step, grad_scale (core/ops/optim.cpp)

/// The rows_to_dense that made gradient `g` of parameter `p`, when SGD can
/// take its rows instead (f32/f64, as the row kernel has them).
Node* rowSparseSource(const Value* p, const Value* g) {
  Node* src = g->producer();
  if (!src || !src->is(Op::rows_to_dense)) return nullptr;
  if (p->dtype() != DType::F32 && p->dtype() != DType::F64) return nullptr;
  return p->shape().size() == 2 && src->input(1)->dtype() == p->dtype() ? src : nullptr;
}

}  // namespace

Result<PassResult> runSparseUpdates(Graph& g, PassContext&) {
  return catchErrors([&]() -> PassResult {
    std::vector<Node*> updates;
    for (const auto& n : g.nodes())
      if (n->is(Op::sgd_update) && n->f("momentum") == 0 && n->f("weight_decay") == 0) updates.push_back(n.get());
    double made = 0;
    std::vector<Node*> sources;
    for (Node* u : updates) {
      const size_t groups = (u->numInputs() - kScalars) / 2;
      std::vector<size_t> kept;
      g.setInsertPoint(u);
      for (size_t k = 0; k < groups; ++k) {
        Value* p = u->input(kScalars + 2 * k);
        Node* src = rowSparseSource(p, u->input(kScalars + 2 * k + 1));
        if (!src) {
          kept.push_back(k);
          continue;
        }
        Node* rows =
            g.create("sgd_update_rows", {u->input(0), u->input(1), u->input(2), p, src->input(0), src->input(1)},
                     {{"skip_nonfinite", u->i("skip_nonfinite")}}, u->scope(), u->provenance());
        g.replaceAllUsesWith(u->output(k), rows->output(0));
        sources.push_back(src);
        ++made;
      }
      if (kept.size() < groups) {  // the rest stay in one update, as they were
        if (!kept.empty()) {
          std::vector<Value*> inputs(u->inputs().begin(), u->inputs().begin() + kScalars);
          for (size_t k : kept) {
            inputs.push_back(u->input(kScalars + 2 * k));
            inputs.push_back(u->input(kScalars + 2 * k + 1));
          }
          Node* rest = g.create("sgd_update", inputs, u->attrs(), u->scope(), u->provenance());
          for (size_t j = 0; j < kept.size(); ++j) g.replaceAllUsesWith(u->output(kept[j]), rest->output(j));
        }
        g.setInsertPoint(nullptr);
        g.erase(u);
      }
      g.setInsertPoint(nullptr);
    }
    for (Node* src : sources)  // unless a norm or an output still reads the dense gradient
      if (src->output(0)->uses().empty()) g.erase(src);
    PassResult r;
    r.changed = made > 0;
    r.statistics = {{"row_updates", made}};
    return r;
  });
}

}  // namespace kiln
