// Placeholder: CPU kernels for the linalg op family are being written.
#include "backend/kernel.h"

namespace kiln {
void registerCpuLinalgKernels(KernelRegistry&) {}
}  // namespace kiln
