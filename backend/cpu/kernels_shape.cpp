// Placeholder: CPU kernels for the shape op family are being written.
#include "backend/kernel.h"

namespace kiln {
void registerCpuShapeKernels(KernelRegistry&) {}
}  // namespace kiln
