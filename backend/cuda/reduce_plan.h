// The plan of a CUDA reduction over any set of dims: the dims merged into
// alternating kept/reduced runs, row mode (innermost run reduced) or column
// mode (innermost run kept), long reductions split over blocks. Host code
// (plus two index helpers the kernels call on the device), so both the
// one-op kernels (cuda_reduce.cuh, nvcc) and the NVRTC codegen of fused
// reductions (fused_codegen.cpp, the host compiler) plan with this one
// function: a fused reduction walks its input exactly as the one-op kernel.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/ops/op_helpers.h"
#include "core/result.h"
#include "core/tensor_type.h"

#ifdef __CUDACC__
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif

namespace kiln::cuda {

inline int64_t ceilDiv(int64_t a, int64_t b) {
  return b == 0 ? 0 : (a + b - 1) / b;
}
inline int nextPow2(int64_t v) {
  int p = 1;
  while (p < v && p < (1 << 30)) p *= 2;
  return p;
}

inline constexpr int kMaxGroups = 12;
/// Threads per block of the plan's kernels (W * H).
inline constexpr int kPlanThreads = 256;

/// Dims innermost first: an index decomposes into coordinates, each weighted
/// by its stride.
struct Dims {
  int n = 0;
  int64_t size[kMaxGroups] = {};
  int64_t stride[kMaxGroups] = {};
  KILN_HOST_DEVICE int64_t offset(int64_t idx) const {
    int64_t off = 0;
    for (int d = 0; d < n; ++d) {
      const int64_t s = size[d];
      off += (idx % s) * stride[d];
      idx /= s;
    }
    return off;
  }
};

inline void push(Dims& d, int64_t size, int64_t stride) {
  if (d.n == kMaxGroups) fail("CUDA reduction: more than " + std::to_string(kMaxGroups) + " dim groups");
  d.size[d.n] = size;
  d.stride[d.n] = stride;
  ++d.n;
}

struct Plan {
  static constexpr int kMaxGroups = cuda::kMaxGroups;
  using Dims = cuda::Dims;
  int64_t outputs = 0, count = 1;
  bool row = true;     ///< innermost run reduced
  bool multi = false;  ///< row: reduced runs besides the innermost; column: more than one reduced run
  Dims kept{};         ///< row: output index -> offset; column: output index / inner -> offset
  Dims red{};          ///< row: (t / inner) -> offset; column: t -> offset
  int64_t inner = 1;   ///< row: innermost reduced run; column: innermost kept run
  int W = 1, H = 1;    ///< row: W threads per (output, split), H of them per block; column: block (W, H)
  int64_t xtiles = 1, splits = 1, chunk = 0, blocks = 0;

  /// Row mode: the input offset of reduced index t of the output whose
  /// first element is at `base`.
  template <bool kMulti>
  KILN_HOST_DEVICE int64_t rowOffset(int64_t base, int64_t t) const {
    if constexpr (kMulti)
      return base + red.offset(t / inner) + t % inner;
    else
      return base + t;
  }
  /// Column mode: the input offset of reduced index r of the output whose
  /// first element is at `base`.
  template <bool kMulti>
  KILN_HOST_DEVICE int64_t colOffset(int64_t base, int64_t r) const {
    if constexpr (kMulti)
      return base + red.offset(r);
    else
      return base + r * red.stride[0];
  }
};

/// The plan of reducing `shape` over `axes` (normalized, any order):
///   - row mode: a group of W threads (a sub-warp, a warp or the whole
///     block) reduces each output; long rows with few outputs are split
///     over several blocks;
///   - column mode: a 2-D block whose x threads walk adjacent outputs
///     (coalesced) and whose y threads split the reduced extent; again split
///     over blocks when there are few outputs.
inline Plan makePlan(const Shape& shape, const std::vector<int64_t>& axes) {
  const std::vector<DimGroup> g = groupDims(shape, axes);
  Plan p;
  p.outputs = 1;
  for (const DimGroup& d : g) (d.reduced ? p.count : p.outputs) *= d.size;
  std::vector<int64_t> strides(g.size());
  int64_t st = 1;
  for (size_t k = g.size(); k-- > 0;) {
    strides[k] = st;
    st *= g[k].size;
  }
  p.row = !g.empty() && g.back().reduced;
  const size_t last = g.empty() ? 0 : g.size() - 1;
  p.inner = g.empty() ? 1 : g.back().size;
  for (size_t k = last; k-- > 0;) push(g[k].reduced ? p.red : p.kept, g[k].size, strides[k]);
  if (p.row) {
    p.multi = p.red.n > 0;
  } else {
    if (p.red.n == 0) push(p.red, 1, 0);
    p.multi = p.red.n > 1;
  }
  if (p.outputs == 0) return p;
  const int64_t R = p.count;
  if (p.row) {
    if (R <= 32)
      p.W = nextPow2(std::max<int64_t>(R, 1));
    else if (R > 4096 || (R > 512 && p.outputs < 2048))
      p.W = kPlanThreads;
    else
      p.W = 32;
    p.H = kPlanThreads / p.W;
    if (p.W == kPlanThreads) p.splits = std::min(ceilDiv(R, 2048), std::max<int64_t>(1, ceilDiv(1024, p.outputs)));
    p.splits = std::max<int64_t>(p.splits, 1);
    p.chunk = ceilDiv(R, p.splits);
    p.splits = R > 0 ? ceilDiv(R, p.chunk) : 1;
    p.blocks = ceilDiv(p.outputs * p.splits, p.H);
  } else {
    p.W = p.inner >= 32 ? 32 : nextPow2(p.inner);
    p.H = kPlanThreads / p.W;
    p.xtiles = ceilDiv(p.inner, p.W);
    const int64_t base = p.xtiles * (p.outputs / p.inner);
    p.splits = std::min(ceilDiv(R, int64_t{p.H} * 16), std::max<int64_t>(1, ceilDiv(1024, base)));
    p.splits = std::max<int64_t>(p.splits, 1);
    p.chunk = ceilDiv(R, p.splits);
    p.splits = R > 0 ? ceilDiv(R, p.chunk) : 1;
    p.blocks = base * p.splits;
  }
  return p;
}

}  // namespace kiln::cuda
