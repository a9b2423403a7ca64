// Gradient rules for the linalg family (see core/grad.h).
#include "core/grad.h"
#include "core/ops/op_helpers.h"

namespace kiln {

void registerLinalgGrads(OpTable& t) { (void)t; }

}  // namespace kiln
