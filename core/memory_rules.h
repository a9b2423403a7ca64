// The memory model of a target: how its kernels use buffers, as liveness
// needs to know it. Three questions per node: is its output a view of input
// 0's buffer (no bytes of its own), may an optimizer update be written over
// the graph input it replaces, may an elementwise result be written over an
// input it is the last to read. A device answers them once, from its kernel
// table (backend/kernel_memory_rules.h), and every consumer reads the same
// answers: the peak estimate after each pass, remat and schedule, the
// memory_plan pass, and the executor that runs the plan. So the peak a pass
// reports is the peak the executor's plan has (in node order).
//
// Without a device (graph tools, text IR tests) the rules are PyTorch's:
// reshape/permute/expand/slice/select/split are views (mayAliasInput), every
// update may be written in place, and elementwise ops (kElementwise,
// kOutput0OverInput) may overwrite a dying input.
#pragma once

#include <functional>
#include <string>

#include "core/ir.h"
#include "core/liveness.h"

namespace kiln {

using NodePredicate = std::function<bool(const Node&)>;

struct MemoryRules {
  /// Whose rules: "pytorch" (the default), "cpu", "cuda"; named in the report.
  std::string target = "pytorch";
  ViewPredicate is_view;             ///< empty: mayAliasInput
  NodePredicate updates_in_place;    ///< empty: every update (inPlaceCandidates)
  NodePredicate writes_over_input;   ///< empty: kElementwise and kOutput0OverInput ops

  /// Whether `n`'s output shares input 0's buffer under these rules.
  bool view(const Node& n) const;
};

/// The liveness of a graph in its node order under `rules`, with every write
/// in place the rules and the order allow.
struct StepLiveness {
  Liveness plain;               ///< views only, every other output in its own buffer
  InPlaceUpdates updates;       ///< optimizer updates written over the state they replace
  InPlaceUpdates elementwise;   ///< elementwise results written over a dying input
  InPlaceUpdates all() const;   ///< both
  Liveness live;                ///< with `all()`: what a plan places
};

StepLiveness analyzeStepLiveness(const Graph& g, const MemoryRules& rules = {});

}  // namespace kiln
