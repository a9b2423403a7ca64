// What every oneDNN kernel shares: the one CPU engine, the mapping from
// Kiln's dtypes to oneDNN's, the cache key prefix, and a per-thread
// workspace for reordered operands and scratchpads.
#pragma once

#include <omp.h>
#include <dnnl.hpp>

#include <cstddef>
#include <initializer_list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"

namespace kiln::cpu {

/// The process's oneDNN CPU engine.
inline dnnl::engine& dnnlEngine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

/// oneDNN's data type for a Kiln dtype it computes with (f32, bf16, f16).
inline std::optional<dnnl::memory::data_type> dnnlDataType(DType t) {
  switch (t) {
    case DType::F32:
      return dnnl::memory::data_type::f32;
    case DType::BF16:
      return dnnl::memory::data_type::bf16;
    case DType::F16:
      return dnnl::memory::data_type::f16;
    default:
      return std::nullopt;
  }
}

/// oneDNN primitives bake in the OpenMP thread count at creation: every
/// primitive cache key starts with it.
inline std::string dnnlKeyPrefix() {
  return std::to_string(omp_get_max_threads()) + ':';
}

}  // namespace kiln::cpu

namespace kiln::cpu {

/// A 64-byte aligned buffer of at least `bytes` for oneDNN's user-managed
/// scratchpad, one per calling thread and reused across calls (a fresh
/// allocation per call would page-fault megabytes every step).
void* dnnlScratch(size_t bytes);

/// Several buffers (reordered operands, a scratchpad) carved out of this
/// thread's scratch buffer, each 64-byte aligned; valid until the next
/// dnnlScratch/DnnlWorkspace on the same thread.
class DnnlWorkspace {
 public:
  explicit DnnlWorkspace(std::initializer_list<size_t> sizes) {
    size_t total = 0;
    for (size_t s : sizes) {
      offsets_.push_back(total);
      total += (s + 63) / 64 * 64;
    }
    base_ = static_cast<char*>(dnnlScratch(total));
  }
  void* part(size_t i) const { return base_ + offsets_.at(i); }

 private:
  std::vector<size_t> offsets_;
  char* base_ = nullptr;
};

/// Execute `prim` with `args` plus a scratchpad of `scratch` on a stream of
/// the engine, and wait for it.
void dnnlExecute(const dnnl::primitive& prim, const dnnl::memory::desc& scratch,
                 std::unordered_map<int, dnnl::memory> args);

}  // namespace kiln::cpu
