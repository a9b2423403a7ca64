// CUDA smoke tests: skip visibly when this machine has no GPU.
#include <gtest/gtest.h>

#include "backend/cuda/cuda_device.h"

namespace kiln::cuda {
namespace {

TEST(CudaDeviceTest, FillKernelRuns) {
  auto devices = listDevices();
  if (!devices.ok() || devices->empty())
    GTEST_SKIP() << "no CUDA device on this machine: " << (devices.ok() ? "0 devices" : devices.error().message);
  auto out = fillSmokeTest(1000, 2.5f);
  ASSERT_TRUE(out.ok()) << out.error().message;
  for (float v : *out) ASSERT_EQ(v, 2.5f);
}

}  // namespace
}  // namespace kiln::cuda
