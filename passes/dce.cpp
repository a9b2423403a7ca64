// dce: dead-code elimination.
//
// Needs: any graph. Does: walks the nodes backwards and erases each node whose
// outputs have no uses and are not graph outputs, unless its op has the
// side-effect trait; walking backwards frees whole dead chains in one sweep.
// Guarantees: same outputs, no dead nodes; graph inputs untouched (an unused
// parameter is still state to save).
#include "passes/dce.h"

#include <unordered_set>

#include "core/op_table.h"

namespace kiln {

Result<PassResult> runDce(Graph& g, PassContext&) {
  std::unordered_set<const Value*> outputs;
  for (const GraphOutput& o : g.outputs()) outputs.insert(o.value);
  std::vector<Node*> order;
  for (const auto& n : g.nodes()) order.push_back(n.get());
  size_t removed = 0;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* n = *it;
    if (n->def().has(kSideEffect)) continue;
    bool live = false;
    for (Value* v : n->outputs()) live = live || !v->uses().empty() || outputs.count(v);
    if (live) continue;
    g.erase(n);
    ++removed;
  }
  return nodesRemoved(removed);
}

}  // namespace kiln
