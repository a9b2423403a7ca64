// Gradient rules for the nn family (see core/grad.h).
#include "core/grad.h"
#include "core/ops/op_helpers.h"

namespace kiln {

void registerNNGrads(OpTable& t) { (void)t; }

}  // namespace kiln
