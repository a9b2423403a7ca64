// Graph-level flops and peak-memory estimates (see graph_cost.h for exactly
// what the memory estimate counts).
#include "core/graph_cost.h"

#include <algorithm>
#include <string_view>

#include "core/liveness.h"
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
  static constexpr std::string_view kAliasing[] = {"reshape", "detach", "permute", "expand",
                                                   "slice",   "select", "split"};
  if (!n.def().has(kView) || n.numInputs() == 0) return false;
  return std::find(std::begin(kAliasing), std::end(kAliasing), n.op()) != std::end(kAliasing);
}

uint64_t estimatePeakBytes(const Graph& g, const MemoryRules& rules) {
  uint64_t peak = 0;
  for (const Value* v : g.inputs()) peak += v->type().bytes();  // the peak of a graph with no nodes
  for (uint64_t live : liveBytesTimeline(analyzeStepLiveness(g, rules).live)) peak = std::max(peak, live);
  return peak;
}

}  // namespace kiln
