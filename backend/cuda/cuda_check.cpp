#include "backend/cuda/cuda_check.h"

#include <cublas_api.h>
#include <cudnn.h>

#include <cstdio>

namespace kiln::cuda {
namespace {

std::string where(const Node* node) {
  return node ? node->describe() + ": " : std::string();
}

std::string mib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

}  // namespace

std::string cudaMessage(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

void check(cudaError_t e, const char* what, const Node* node) {
  if (e == cudaSuccess) return;
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the sticky-free allocation error
    fail(where(node) + outOfMemoryMessage(0, what));
  }
  fail(where(node) + what + " failed (" + cudaMessage(e) + ")");
}

void checkLaunch(const char* kernel, const Node* node) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail(where(node) + "launching " + kernel + " failed (" + cudaMessage(e) + ")");
}

void checkCublas(int status, const char* what, const Node* node) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  fail(where(node) + what + " failed (" + cublasGetStatusName(static_cast<cublasStatus_t>(status)) + ": " +
       cublasGetStatusString(static_cast<cublasStatus_t>(status)) + ")");
}

void checkCudnn(int status, const char* what, const Node* node) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  fail(where(node) + what + " failed (" + cudnnGetErrorString(static_cast<cudnnStatus_t>(status)) + ")");
}

std::string outOfMemoryMessage(size_t asked, const std::string& what) {
  size_t free_bytes = 0, total = 0;
  std::string msg = "out of device memory";
  if (!what.empty()) msg += " in " + what;
  if (asked) msg += ": asked for " + mib(asked);
  if (cudaMemGetInfo(&free_bytes, &total) == cudaSuccess)
    msg += std::string(asked ? "," : ":") + " " + mib(free_bytes) + " free of " + mib(total);
  return msg;
}

}  // namespace kiln::cuda
