// Reference CPU kernels for the data-dependent layout ops of core/ops/shape.cpp:
// `index` (take along a dim with an index tensor of any shape; negative
// indices count from the end, as in x[:, idx]) and `gather` (torch.gather:
// indices must lie in [0, size)). An index out of range is an error that names
// the index, the dim and its size; it is checked before anything is written.
#include <cstring>

#include "backend/cpu/cpu_loops.h"
#include "backend/kernel.h"
#include "core/ops/op_helpers.h"

namespace kiln::cpu {
namespace {

using Inputs = std::span<const Tensor>;
using Outputs = std::span<Tensor>;

[[noreturn]] void indexOutOfRange(const Node& n, int64_t v, int64_t axis, int64_t size) {
  opFail(n, "index " + std::to_string(v) + " is out of range for dimension " + std::to_string(axis) + " of size " +
                std::to_string(size));
}

/// x viewed as [outer, size, inner]; out as [outer, m, inner] with m = idx.numel().
void indexKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  const Tensor& x = in[0];
  const int64_t axis = normalizeAxis(n.i("dim"), x.rank());
  const Tensor idx = asDType(in[1], DType::I64);
  int64_t outer = 1, size = x.rank() == 0 ? 1 : x.shape()[axis], inner = 1;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (d < axis) outer *= x.shape()[d];
    if (d > axis) inner *= x.shape()[d];
  }
  const int64_t m = idx.numel();
  std::vector<int64_t> pos(static_cast<size_t>(m));
  const int64_t* pi = idx.data<int64_t>();
  for (int64_t j = 0; j < m; ++j) {
    const int64_t v = pi[j];
    if (v < -size || v >= size) indexOutOfRange(n, v, axis, size);
    pos[j] = v < 0 ? v + size : v;
  }
  const size_t block = static_cast<size_t>(inner) * dtypeSize(x.dtype());
  const auto* src = static_cast<const unsigned char*>(x.raw());
  auto* dst = static_cast<unsigned char*>(o.raw());
  parallelFor(outer * m, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(inner, 1)), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t k = t / m, j = t % m;
      std::memcpy(dst + t * block, src + (k * size + pos[j]) * block, block);
    }
  });
}

/// torch.gather: out[i...] = x[i... with i[dim] replaced by idx[i...]].
void gatherKernel(const Node& n, Inputs in, Outputs out, KernelContext&) {
  Tensor& o = allocOutput(n, out, 0);
  const Tensor& x = in[0];
  const Tensor idx = asDType(in[1], DType::I64);
  const int64_t axis = normalizeAxis(n.i("dim"), x.rank());
  const int64_t size = x.rank() == 0 ? 1 : x.shape()[axis];
  for (int64_t d = 0; d < x.rank(); ++d)
    if (d != axis && idx.shape()[d] > x.shape()[d])
      opFail(n, "index size " + std::to_string(idx.shape()[d]) + " exceeds the input size " +
                    std::to_string(x.shape()[d]) + " at dimension " + std::to_string(d));
  const int64_t* pi = idx.data<int64_t>();
  for (int64_t j = 0, m = idx.numel(); j < m; ++j)
    if (pi[j] < 0 || pi[j] >= size) indexOutOfRange(n, pi[j], axis, size);

  // Walk the index shape: x's stride along `axis` comes from the index value.
  Shape xst = contiguousStrides(x.shape());
  const int64_t axis_stride = x.rank() == 0 ? 0 : xst[axis];
  if (x.rank() > 0) xst[axis] = 0;
  const Shape ist = contiguousStrides(idx.shape());
  dispatchAll(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = x.data<T>();
    T* dst = o.data<T>();
    forEachStrided<2>(idx.shape(), {ist, xst}, [&](const int64_t* off, const int64_t* st, int64_t cnt) {
      for (int64_t i = 0; i < cnt; ++i) {
        const int64_t k = off[0] + i * st[0];
        dst[k] = src[off[1] + i * st[1] + pi[k] * axis_stride];
      }
    });
  });
}

}  // namespace

void registerCpuShapeIndexKernels(KernelRegistry& r) {
  r.add({"index", "cpu", "cpu.index", 0, nullptr, indexKernel});
  r.add({"gather", "cpu", "cpu.gather", 0, nullptr, gatherKernel});
}

}  // namespace kiln::cpu
