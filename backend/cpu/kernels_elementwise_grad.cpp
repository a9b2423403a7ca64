// CPU kernels: elementwise grad (filled in with their gradient rules).
#include "backend/kernel.h"

namespace kiln {

void registerCpuElementwiseGradKernels(KernelRegistry& r) { (void)r; }

}  // namespace kiln
