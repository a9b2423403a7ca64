// Every op is trainable through or says why not: it has a gradient rule, or
// a no-gradient reason (integer/boolean results, piecewise-constant math,
// sources, the optimizer ops themselves). Anything else would make autodiff
// fail on a model that uses it.
#include <gtest/gtest.h>

#include "core/op_table.h"

namespace kiln {
namespace {

// Ops that run after the backward and are never differentiated.
bool isTrainingOnly(const std::string& name) {
  return name == "sgd_update" || name == "adam_update" || name == "global_norm" || name.ends_with("_backward");
}

TEST(GradCoverage, EveryForwardOpHasARuleOrAReason) {
  std::string missing;
  for (const auto& [name, def] : OpTable::get().all()) {
    if (isTrainingOnly(name)) continue;
    if (!def.grad && def.no_grad_reason.empty()) missing += " " + name;
  }
  EXPECT_TRUE(missing.empty()) << "ops without a gradient rule or a no-grad reason:" << missing;
}

TEST(GradCoverage, RuleAndReasonExcludeEachOther) {
  for (const auto& [name, def] : OpTable::get().all())
    EXPECT_FALSE(def.grad && !def.no_grad_reason.empty()) << name << " has both a rule and a no-grad reason";
}

}  // namespace
}  // namespace kiln
