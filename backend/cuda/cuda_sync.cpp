#include "backend/cuda/cuda_sync.h"

#include <atomic>
#include <mutex>

#include "backend/comm/watchdog.h"
#include "backend/cuda/cuda_check.h"

namespace kiln::cuda {
namespace {

std::atomic<uint64_t> g_sync_calls{0};
std::mutex g_watch_mu;
std::shared_ptr<const HostWaitWatch> g_watch;

std::shared_ptr<const HostWaitWatch> currentWatch() {
  std::lock_guard<std::mutex> lock(g_watch_mu);
  return g_watch;
}

/// Wait until `query` stops saying cudaErrorNotReady: blocking (`sync`)
/// without a watch, polled under it; the call's own error is thrown either way.
template <typename Query, typename Sync>
void waitFor(Query query, Sync sync, const char* what, const Node* node) {
  if (auto w = currentWatch()) {
    cudaError_t last = cudaSuccess;
    watchUntilDone({[&] { return (last = query()) != cudaErrorNotReady; }, w->failure, w->abort}, w->timeout,
                   std::string(what) + " (waiting for the GPU)", w->hint);
    check(last, what, node);
    return;
  }
  check(sync(), what, node);
}

void waitStream(cudaStream_t s, const char* what, const Node* node = nullptr) {
  waitFor([&] { return cudaStreamQuery(s); }, [&] { return cudaStreamSynchronize(s); }, what, node);
}

}  // namespace

uint64_t syncCalls() {
  return g_sync_calls.load();
}

void setHostWaitWatch(std::shared_ptr<const HostWaitWatch> watch) {
  std::lock_guard<std::mutex> lock(g_watch_mu);
  g_watch = std::move(watch);
}

void streamSync(cudaStream_t s, const char* what, const Node* node) {
  ++g_sync_calls;
  waitStream(s, what, node);
}

void drain(cudaStream_t s) noexcept {
  ++g_sync_calls;
  if (s) cudaStreamSynchronize(s);
}

void eventSync(cudaEvent_t e, const char* what) {
  ++g_sync_calls;
  waitFor([&] { return cudaEventQuery(e); }, [&] { return cudaEventSynchronize(e); }, what, nullptr);
}

void copyToHost(void* dst, const void* src, size_t bytes, cudaStream_t s, const char* what) {
  ++g_sync_calls;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s), what);
  waitStream(s, what);
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
