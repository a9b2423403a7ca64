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

/// Several buffers (reordered operands, a scratchpad) carved out of one
/// 64-byte aligned buffer of the calling thread, reused across calls (a
/// fresh allocation per call page-faulted megabytes every step); valid
/// until the next DnnlWorkspace on the same thread.
class DnnlWorkspace {
 public:
  explicit DnnlWorkspace(std::initializer_list<size_t> sizes);
  void* part(size_t i) const { return base_ + offsets_.at(i); }

 private:
  std::vector<size_t> offsets_;
  char* base_ = nullptr;
};

}  // namespace kiln::cpu
