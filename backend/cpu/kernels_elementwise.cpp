// Placeholder: CPU kernels for the elementwise op family are being written.
#include "backend/kernel.h"

namespace kiln {
void registerCpuElementwiseKernels(KernelRegistry&) {}
}  // namespace kiln
