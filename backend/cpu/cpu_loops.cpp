// Non-template parts of the CPU loop helpers: the OpenMP parallel-for, dim
// coalescing for strided walks, broadcast strides, and dtype conversion.
#include "backend/cpu/cpu_loops.h"

#include "backend/cpu/row_math.h"
#include "core/tsan_sync.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>

#include <omp.h>

namespace kiln::cpu {

void failDType(DType t, const char* what) {
  fail("dtype " + std::string(dtypeName(t)) + " is not supported by " + what);
}

Shape broadcastStrides(const Shape& in, const Shape& out) {
  Shape contig = contiguousStrides(in);
  Shape st(out.size(), 0);
  const size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) st[off + i] = in[i] == 1 ? 0 : contig[i];
  return st;
}

Tensor castTensor(const Tensor& t, DType dtype) {
  Tensor out = Tensor::empty({dtype, t.shape()});
  castInto(t, out);
  return out;
}

void castInto(const Tensor& t, Tensor& out) {
  // amp's casts (weights to bf16 every step, activations and gradients back):
  // row_math's vector clones, the same rounding (floatToBf16) as below.
  if (t.dtype() == DType::F32 && out.dtype() == DType::BF16) {
    const float* src = t.data<float>();
    BFloat16* dst = out.data<BFloat16>();
    parallelFor(t.numel(), kParallelGrain, [src, dst](int64_t b, int64_t e) { rowToBf16(src + b, dst + b, e - b); });
    return;
  }
  if (t.dtype() == DType::BF16 && out.dtype() == DType::F32) {
    const BFloat16* src = t.data<BFloat16>();
    float* dst = out.data<float>();
    parallelFor(t.numel(), kParallelGrain, [src, dst](int64_t b, int64_t e) { rowFromBf16(src + b, dst + b, e - b); });
    return;
  }
  dispatchAll(t.dtype(), [&](auto in_tag) {
    using From = typename decltype(in_tag)::type;
    dispatchAll(out.dtype(), [&](auto out_tag) {
      using To = typename decltype(out_tag)::type;
      const From* src = t.data<From>();
      To* dst = out.data<To>();
      parallelFor(t.numel(), kParallelGrain, [src, dst](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) dst[i] = convert<To>(src[i]);
      });
    });
  });
}

namespace {
/// f(tag) with tag's type an unsigned integer of `bytes` bytes: copying needs only the size.
template <class F>
void dispatchBySize(size_t bytes, F&& f) {
  switch (bytes) {
    case 1:
      return f(TypeTag<uint8_t>{});
    case 2:
      return f(TypeTag<uint16_t>{});
    case 4:
      return f(TypeTag<uint32_t>{});
    case 8:
      return f(TypeTag<uint64_t>{});
    default:
      fail("copyStrided: unsupported element size " + std::to_string(bytes));
  }
}
}  // namespace

void copyStrided(Tensor& out, const Tensor& in, int64_t in_offset, const Shape& in_strides) {
  dispatchBySize(dtypeSize(in.dtype()), [&](auto tag) {
    using E = typename decltype(tag)::type;
    E* o = out.data<E>();
    const E* src = in.data<E>() + in_offset;
    forEachStrided<2>(out.shape(), {contiguousStrides(out.shape()), in_strides},
                      [&](const int64_t* off, const int64_t* st, int64_t n) {
                        E* po = o + off[0];
                        const E* pi = src + off[1];
                        if (st[1] == 1)
                          std::memcpy(po, pi, static_cast<size_t>(n) * sizeof(E));
                        else if (st[1] == 0)
                          std::fill(po, po + n, *pi);
                        else
                          for (int64_t i = 0; i < n; ++i) po[i] = pi[i * st[1]];
                      });
  });
}

Tensor permuteCopy(const Tensor& t, const std::vector<int64_t>& dims) {
  Shape shape;
  for (int64_t d : dims) shape.push_back(t.shape()[d]);
  Tensor out = Tensor::empty({t.dtype(), shape});
  permuteInto(t, dims, out);
  return out;
}

void permuteInto(const Tensor& t, const std::vector<int64_t>& dims, Tensor& out) {
  Shape strides;
  const Shape contig = contiguousStrides(t.shape());
  for (int64_t d : dims) strides.push_back(contig[d]);
  copyStrided(out, t, 0, strides);
}

namespace detail {

void parallelForImpl(int64_t n, int64_t grain, ChunkFn fn, void* ctx) {
  const int max_threads = omp_get_max_threads();
  if (n < grain || max_threads <= 1 || omp_in_parallel()) {
    fn(ctx, 0, n);
    return;
  }
  // At least grain/4 elements per thread so thread start-up stays amortized.
  const int64_t min_chunk = std::max<int64_t>(1, grain / 4);
  const int threads = static_cast<int>(std::min<int64_t>(max_threads, (n + min_chunk - 1) / min_chunk));
  std::exception_ptr error;
  kilnTsanRelease(ctx);  // fork and join, for TSan (libgomp's are invisible to it)
#pragma omp parallel num_threads(threads)
  {
    kilnTsanAcquire(ctx);
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t begin = n * t / nt, end = n * (t + 1) / nt;
    try {
      if (begin < end) fn(ctx, begin, end);
    } catch (...) {
#pragma omp critical(kiln_parallel_for_error)
      if (!error) error = std::current_exception();
    }
    kilnTsanRelease(ctx);
  }
  kilnTsanAcquire(ctx);
  if (error) std::rethrow_exception(error);
}

void coalesce(Shape& shape, Shape** strides, size_t n) {
  // Drop size-1 dims: their strides never matter.
  Shape s;
  std::vector<Shape> st(n);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    s.push_back(shape[d]);
    for (size_t k = 0; k < n; ++k) st[k].push_back((*strides[k])[d]);
  }
  // Merge dim d into d+1 when every operand steps through d as one longer d+1.
  Shape ms;
  std::vector<Shape> mst(n);
  for (size_t d = 0; d < s.size(); ++d) {
    bool merge = !ms.empty();
    for (size_t k = 0; k < n && merge; ++k) merge = mst[k].back() == st[k][d] * s[d];
    if (merge) {
      ms.back() *= s[d];
      for (size_t k = 0; k < n; ++k) mst[k].back() = st[k][d];
    } else {
      ms.push_back(s[d]);
      for (size_t k = 0; k < n; ++k) mst[k].push_back(st[k][d]);
    }
  }
  if (ms.empty()) {
    ms.push_back(1);
    for (size_t k = 0; k < n; ++k) mst[k].push_back(1);
  }
  shape = std::move(ms);
  for (size_t k = 0; k < n; ++k) *strides[k] = std::move(mst[k]);
}

}  // namespace detail
}  // namespace kiln::cpu
