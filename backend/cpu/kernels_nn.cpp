// Placeholder: CPU kernels for the nn op family are being written.
#include "backend/kernel.h"

namespace kiln {
void registerCpuNNKernels(KernelRegistry&) {}
}  // namespace kiln
