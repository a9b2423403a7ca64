// The memory model of a target (see memory_rules.h).
#include "core/memory_rules.h"

#include "core/graph_cost.h"

namespace kiln {

bool MemoryRules::view(const Node& n) const {
  return n.numInputs() > 0 && (is_view ? is_view(n) : mayAliasInput(n));
}

InPlaceUpdates StepLiveness::all() const {
  InPlaceUpdates both = updates;
  both.insert(elementwise.begin(), elementwise.end());
  return both;
}

StepLiveness analyzeStepLiveness(const Graph& g, const MemoryRules& rules) {
  StepLiveness s;
  s.plain = analyzeLiveness(g, rules.is_view);
  s.updates = inPlaceCandidates(g, s.plain, rules.updates_in_place);
  s.elementwise = elementwiseInPlace(s.plain, rules.writes_over_input);
  const InPlaceUpdates both = s.all();
  s.live = analyzeLiveness(g, rules.is_view, &both);
  return s;
}

}  // namespace kiln
