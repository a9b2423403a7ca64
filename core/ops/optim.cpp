// Optimizer ops (filled in with the optimizer pass).
#include "core/ops/op_helpers.h"

namespace kiln {

void registerOptimizerOps(OpTable& t) { (void)t; }

}  // namespace kiln
