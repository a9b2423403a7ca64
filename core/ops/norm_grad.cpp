// Gradient rules for the norm part of the nn family (batch/layer/group norm, softmax, log_softmax) (see core/grad.h).
#include "core/grad.h"
#include "core/ops/op_helpers.h"

namespace kiln {

void registerNormGrads(OpTable& t) { (void)t; }

}  // namespace kiln
