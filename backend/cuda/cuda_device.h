// CUDA device discovery. Built whenever KILN_WITH_CUDA is on, even on
// machines without a GPU, so the CUDA toolchain integration never rots.
#pragma once

#include <string>
#include <vector>

#include "core/result.h"

namespace kiln::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int compute_major = 0, compute_minor = 0;
  size_t memory_bytes = 0;
};

/// Visible CUDA devices; an Error (not a crash) when the driver is missing.
Result<std::vector<DeviceInfo>> listDevices();

/// Fill `n` floats on device 0 with `value` using a Kiln kernel and copy them
/// back: a smoke test that a kernel launches and runs.
Result<std::vector<float>> fillSmokeTest(size_t n, float value);

}  // namespace kiln::cuda
