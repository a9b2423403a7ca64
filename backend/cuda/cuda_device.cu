#include <cuda_runtime.h>

#include "backend/cuda/cuda_device.h"

namespace kiln::cuda {
namespace {

std::string cudaMessage(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

__global__ void fillKernel(float* out, size_t n, float value) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = value;
}

}  // namespace

Result<std::vector<DeviceInfo>> listDevices() {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return Error{"no usable CUDA device (" + cudaMessage(e) + ")"};
  std::vector<DeviceInfo> out;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    out.push_back({i, p.name, p.major, p.minor, p.totalGlobalMem});
  }
  return out;
}

Result<std::vector<float>> fillSmokeTest(size_t n, float value) {
  float* d = nullptr;
  cudaError_t e = cudaMalloc(&d, n * sizeof(float));
  if (e != cudaSuccess) return Error{"cudaMalloc failed (" + cudaMessage(e) + ")"};
  fillKernel<<<static_cast<unsigned>((n + 255) / 256), 256>>>(d, n, value);
  std::vector<float> host(n);
  e = cudaMemcpy(host.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(d);
  if (e != cudaSuccess) return Error{"kernel or copy failed (" + cudaMessage(e) + ")"};
  return host;
}

}  // namespace kiln::cuda
