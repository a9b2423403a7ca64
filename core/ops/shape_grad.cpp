// Gradient rules for the shape family (see core/grad.h).
#include "core/grad.h"
#include "core/ops/op_helpers.h"

namespace kiln {

void registerShapeGrads(OpTable& t) { (void)t; }

}  // namespace kiln
