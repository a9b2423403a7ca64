// Graph-level flops and peak-memory estimates (see graph_cost.h for exactly
// what the memory estimate counts).
#include "core/graph_cost.h"

#include <algorithm>
#include <limits>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/op_table.h"

namespace kiln {

double graphFlops(const Graph& g) {
  double flops = 0;
  for (const auto& n : g.nodes()) flops += nodeCost(*n).flops;
  return flops;
}

bool mayAliasInput(const Node& n) {
  // The kView trait also covers ops that only move data into a new buffer;
  // these are the ones that can return a strided view of their input.
  static constexpr std::string_view kAliasing[] = {"reshape", "permute", "expand", "slice", "select", "split"};
  if (!n.def().has(kView) || n.numInputs() == 0) return false;
  return std::find(std::begin(kAliasing), std::end(kAliasing), n.op()) != std::end(kAliasing);
}

uint64_t estimatePeakBytes(const Graph& g) {
  constexpr size_t kToTheEnd = std::numeric_limits<size_t>::max();
  // The buffer that holds each value: its own, or for a view the buffer of
  // its source (followed through chains of views).
  std::unordered_map<const Value*, const Value*> buffer_of;
  auto buffer = [&](const Value* v) {
    auto it = buffer_of.find(v);
    return it == buffer_of.end() ? v : it->second;
  };
  // Index of the last node that needs each intermediate buffer.
  std::unordered_map<const Value*, size_t> last_use;
  auto extend = [&](const Value* buf, size_t at) {
    if (buf->isGraphInput()) return;  // live for the whole step anyway
    auto [it, inserted] = last_use.emplace(buf, at);
    if (!inserted) it->second = std::max(it->second, at);
  };
  std::vector<const Node*> order;
  for (const auto& n : g.nodes()) {
    const size_t i = order.size();
    order.push_back(n.get());
    for (const Value* v : n->inputs()) extend(buffer(v), i);
    const bool alias = mayAliasInput(*n);
    for (const Value* o : n->outputs()) {
      if (alias) buffer_of[o] = buffer(n->input(0));
      extend(buffer(o), i);  // live at least while its producer runs
    }
  }
  for (const GraphOutput& o : g.outputs()) extend(buffer(o.value), kToTheEnd);

  std::vector<std::vector<const Value*>> frees(order.size());
  for (const auto& [buf, at] : last_use)
    if (at != kToTheEnd) frees[at].push_back(buf);

  uint64_t live = 0;
  for (const Value* v : g.inputs()) live += v->type().bytes();
  uint64_t peak = live;
  for (size_t i = 0; i < order.size(); ++i) {
    if (!mayAliasInput(*order[i]))
      for (const Value* o : order[i]->outputs()) live += o->type().bytes();
    peak = std::max(peak, live);
    for (const Value* buf : frees[i]) live -= buf->type().bytes();
  }
  return peak;
}

}  // namespace kiln
