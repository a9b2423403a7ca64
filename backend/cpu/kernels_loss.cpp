// Placeholder: CPU kernels for the loss op family are being written.
#include "backend/kernel.h"

namespace kiln {
void registerCpuLossKernels(KernelRegistry&) {}
}  // namespace kiln
