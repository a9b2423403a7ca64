#include "backend/cuda/cuda_sync.h"

#include <atomic>

#include "backend/cuda/cuda_check.h"

namespace kiln::cuda {
namespace {

std::atomic<uint64_t> g_sync_calls{0};

}  // namespace

uint64_t syncCalls() {
  return g_sync_calls.load();
}

void streamSync(cudaStream_t s, const char* what, const Node* node) {
  ++g_sync_calls;
  check(cudaStreamSynchronize(s), what, node);
}

void drain(cudaStream_t s) noexcept {
  ++g_sync_calls;
  if (s) cudaStreamSynchronize(s);
}

void eventSync(cudaEvent_t e, const char* what) {
  ++g_sync_calls;
  check(cudaEventSynchronize(e), what);
}

void copyToHost(void* dst, const void* src, size_t bytes, cudaStream_t s, const char* what) {
  ++g_sync_calls;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s), what);
  check(cudaStreamSynchronize(s), what);
}

void copyToDevice(void* dst, const void* src, size_t bytes, cudaStream_t s, const char* what) {
  ++g_sync_calls;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s), what);
  check(cudaStreamSynchronize(s), what);
}

void* deviceAlloc(size_t bytes, const char* what) {
  ++g_sync_calls;
  void* p = nullptr;
  if (bytes == 0) return nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    fail(outOfMemoryMessage(bytes, what));
  }
  check(e, what);
  return p;
}

void deviceFree(void* p) {
  ++g_sync_calls;
  if (p) cudaFree(p);
}

void* pinnedAlloc(size_t bytes, const char* what) {
  ++g_sync_calls;
  void* p = nullptr;
  if (bytes == 0) return nullptr;
  const cudaError_t e = cudaMallocHost(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    fail(std::string("out of pinned host memory in ") + what);
  }
  check(e, what);
  return p;
}

void pinnedFree(void* p) {
  ++g_sync_calls;
  if (p) cudaFreeHost(p);
}

}  // namespace kiln::cuda
