// Placeholder: CPU kernels for the reduction op family are being written.
#include "backend/kernel.h"

namespace kiln {
void registerCpuReductionKernels(KernelRegistry&) {}
}  // namespace kiln
