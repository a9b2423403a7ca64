// cse: common-subexpression elimination.
//
// Needs: any graph. Does: walks the nodes in order and keys each by (op,
// input values, explicit attributes, output types); a node whose key was
// seen has its outputs replaced by the first node's and is erased. Ops with
// the random trait (dropout, rand) or the side-effect trait are never
// merged; sources (full, arange) are, which folds the many equal constants
// autodiff emits. Walking in order merges whole duplicate chains in one
// sweep: once a node's duplicate is gone, its users share inputs.
// Guarantees: same outputs bit for bit (the merged nodes computed the same
// values); the first node keeps its scope and provenance.
#include "passes/cse.h"

#include <cstdint>
#include <string>
#include <unordered_map>

#include "core/op_table.h"

namespace kiln {
namespace {

std::string keyOf(const Node& n) {
  std::string k = n.op();
  k += '(';
  for (const Value* v : n.inputs()) k += std::to_string(reinterpret_cast<uintptr_t>(v)) + ',';
  k += "){";
  for (const auto& [name, a] : n.attrs()) k += name + '=' + attrToString(a) + ';';
  k += "}:";
  for (const Value* v : n.outputs()) k += v->type().str() + ',';
  return k;
}

}  // namespace

Result<PassResult> runCse(Graph& g, PassContext&) {
  std::unordered_map<std::string, Node*> seen;
  std::vector<Node*> order;
  for (const auto& n : g.nodes()) order.push_back(n.get());
  size_t removed = 0;
  for (Node* n : order) {
    if (n->def().has(kRandom) || n->def().has(kSideEffect) || n->numOutputs() == 0) continue;
    auto [it, fresh] = seen.emplace(keyOf(*n), n);
    if (fresh) continue;
    Node* first = it->second;
    for (size_t i = 0; i < n->numOutputs(); ++i) g.replaceAllUsesWith(n->outputs()[i], first->outputs()[i]);
    g.erase(n);
    ++removed;
  }
  return nodesRemoved(removed);
}

}  // namespace kiln
