// Gradient rules for the loss family (see core/grad.h).
#include "core/grad.h"
#include "core/ops/op_helpers.h"

namespace kiln {

void registerLossGrads(OpTable& t) { (void)t; }

}  // namespace kiln
