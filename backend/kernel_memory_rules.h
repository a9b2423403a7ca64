// A device's memory rules (core/memory_rules.h) read off its kernel table,
// so the passes count memory the way the executor will use it.
//
// Per op, over the kernels of the dialects a selection may use:
//  - a view when its kernels' outputs are views of input 0
//    (output_views_input0; every kernel of an op must agree, the executor
//    checks the one it binds);
//  - an update written over the state it replaces when every such kernel
//    allows it (updates_in_place), an elementwise result written over a
//    dying input when every one allows it (writes_over_input): whichever
//    kernel the selection or autotuning binds, the plan stays valid.
// The flags are read once per op (kernel predicates, which may build
// oneDNN primitives, are not called) into a table indexed by the op's
// symbol, so the rules are cheap enough for the peak estimate after every
// pass.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "backend/kernel_table.h"
#include "core/memory_rules.h"

namespace kiln {

template <typename Def>
MemoryRules kernelMemoryRules(const KernelTable<Def>& table, const DialectOrder& order, std::string target) {
  struct OpFlags {
    bool view = false, updates = true, overwrite = true;
  };
  // An op without a kernel has no rule to give: no view, nothing in place
  // (the executor reports the missing kernel).
  auto flags = std::make_shared<std::vector<OpFlags>>(kOpCount, OpFlags{false, false, false});
  for (size_t i = 0; i < kOpCount; ++i) {
    OpFlags f;
    bool any = false;
    for (const Def* k : table.candidates(static_cast<Op>(i))) {
      if (order.rank(k->dialect) < 0) continue;
      any = true;
      f.view = f.view || k->output_views_input0;
      f.updates = f.updates && k->updates_in_place;
      f.overwrite = f.overwrite && k->writes_over_input;
    }
    if (any) (*flags)[i] = f;
  }
  auto of = [flags](const Node& n) -> const OpFlags& { return (*flags)[static_cast<size_t>(n.kind())]; };
  MemoryRules r;
  r.target = std::move(target);
  r.is_view = [of](const Node& n) { return of(n).view; };
  r.updates_in_place = [of](const Node& n) { return of(n).updates; };
  r.writes_over_input = [of](const Node& n) { return of(n).overwrite; };
  return r;
}

/// Whether kernel `k`, bound to `n`, does what `rules` told the plan: its
/// output a view exactly when the rules say so, and allowing every write in
/// place the rules allow. An Error names the node and the kernel (a kernel
/// table whose kernels of one op disagree).
template <typename Def>
Status checkKernelFollowsRules(const Def& k, const Node& n, const MemoryRules& rules) {
  const bool view = rules.view(n);
  if (k.output_views_input0 != view || (rules.updates_in_place && rules.updates_in_place(n) && !k.updates_in_place) ||
      (rules.writes_over_input && rules.writes_over_input(n) && !k.writes_over_input))
    return Error{"kernel " + k.name + " bound to " + n.describe() + " does not follow the " + rules.target +
                 " memory rules the plan was made with (the kernels of op '" + n.op() + "' disagree)"};
  return {};
}

}  // namespace kiln
