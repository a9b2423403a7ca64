// Loop helpers shared by the CPU reference kernels: element types for every
// DType (half types compute in float), dtype dispatch, value conversion with
// PyTorch's rules, a broadcasting strided walk, and an OpenMP parallel-for.
//
// Typical use (a binary kernel over broadcast inputs of dtype T):
//
//   dispatchAll(out.dtype(), [&](auto tag) {
//     using T = typename decltype(tag)::type;   // float, Half, int64_t, bool...
//     using C = compute_t<T>;                    // float for Half/BFloat16
//     T* o = out.data<T>();
//     const T *a = x.data<T>(), *b = y.data<T>();
//     forEachStrided<3>(out.shape(), {contiguousStrides(out.shape()),
//                                     broadcastStrides(x.shape(), out.shape()),
//                                     broadcastStrides(y.shape(), out.shape())},
//                       [&](const int64_t* off, const int64_t* st, int64_t n) {
//                         for (int64_t i = 0; i < n; ++i)
//                           o[off[0] + i * st[0]] = T(C(a[off[1] + i * st[1]]) + C(b[off[2] + i * st[2]]));
//                       });
//   });
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/result.h"
#include "core/tensor.h"

namespace kiln::cpu {

/// Storage type of F16 elements; converts to and from float (round to nearest even).
struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) : bits(floatToHalf(f)) {}  // NOLINT: implicit like c10::Half
  operator float() const { return halfToFloat(bits); }
};

/// Storage type of BF16 elements; converts to and from float (round to nearest even).
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) : bits(floatToBf16(f)) {}  // NOLINT: implicit like c10::BFloat16
  operator float() const { return bf16ToFloat(bits); }
};

template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
template <class T>
inline constexpr bool is_floating_v = std::is_floating_point_v<T> || is_half_v<T>;

/// Type arithmetic is done in: float for the half types, T otherwise.
template <class T>
using compute_t = std::conditional_t<is_half_v<T>, float, T>;
/// Accumulator for sums: double for floating types, int64_t for integers and bool.
template <class T>
using acc_t = std::conditional_t<is_floating_v<T>, double, int64_t>;

/// The DType whose storage type is T.
template <class T>
constexpr DType dtypeOf() {
  if constexpr (std::is_same_v<T, float>)
    return DType::F32;
  else if constexpr (std::is_same_v<T, double>)
    return DType::F64;
  else if constexpr (std::is_same_v<T, Half>)
    return DType::F16;
  else if constexpr (std::is_same_v<T, BFloat16>)
    return DType::BF16;
  else if constexpr (std::is_same_v<T, int64_t>)
    return DType::I64;
  else if constexpr (std::is_same_v<T, int32_t>)
    return DType::I32;
  else if constexpr (std::is_same_v<T, int16_t>)
    return DType::I16;
  else if constexpr (std::is_same_v<T, int8_t>)
    return DType::I8;
  else if constexpr (std::is_same_v<T, uint8_t>)
    return DType::U8;
  else {
    static_assert(std::is_same_v<T, bool>, "not a Kiln storage type");
    return DType::Bool;
  }
}

/// Passed to dispatch callbacks; `typename decltype(tag)::type` is the storage type.
template <class T>
struct TypeTag {
  using type = T;
};

[[noreturn]] void failDType(DType t, const char* what);

/// Call f(TypeTag<T>{}) with T the storage type of `t` (all ten dtypes; Bool is `bool`).
template <class F>
decltype(auto) dispatchAll(DType t, F&& f) {
  switch (t) {
    case DType::F32:
      return f(TypeTag<float>{});
    case DType::F64:
      return f(TypeTag<double>{});
    case DType::F16:
      return f(TypeTag<Half>{});
    case DType::BF16:
      return f(TypeTag<BFloat16>{});
    case DType::I64:
      return f(TypeTag<int64_t>{});
    case DType::I32:
      return f(TypeTag<int32_t>{});
    case DType::I16:
      return f(TypeTag<int16_t>{});
    case DType::I8:
      return f(TypeTag<int8_t>{});
    case DType::U8:
      return f(TypeTag<uint8_t>{});
    case DType::Bool:
      return f(TypeTag<bool>{});
  }
  failDType(t, "dispatchAll");
}

/// Same for the four floating dtypes; other dtypes throw KilnException.
template <class F>
decltype(auto) dispatchFloating(DType t, F&& f) {
  switch (t) {
    case DType::F32:
      return f(TypeTag<float>{});
    case DType::F64:
      return f(TypeTag<double>{});
    case DType::F16:
      return f(TypeTag<Half>{});
    case DType::BF16:
      return f(TypeTag<BFloat16>{});
    default:
      failDType(t, "a floating-point kernel");
  }
}

/// Convert one value with PyTorch's rules: to bool is `!= 0` (NaN is true),
/// floating to integer truncates toward zero (through int64, so narrow types wrap).
template <class To, class From>
inline To convert(From v) {
  using CF = compute_t<From>;
  CF c = static_cast<CF>(v);
  if constexpr (std::is_same_v<To, bool>)
    return c != CF(0);
  else if constexpr (std::is_integral_v<To> && is_floating_v<From>)
    return static_cast<To>(static_cast<int64_t>(c));
  else if constexpr (is_half_v<To>)
    return To(static_cast<float>(c));
  else
    return static_cast<To>(c);
}

/// A fresh contiguous copy of `t` converted to `dtype` (a plain clone when equal).
Tensor castTensor(const Tensor& t, DType dtype);
/// Converts `t` elementwise into `out` (same shape, out's dtype).
void castInto(const Tensor& t, Tensor& out);
/// `t` itself when it already has `dtype`, else castTensor (no copy in the common case).
inline Tensor asDType(const Tensor& t, DType dtype) {
  return t.dtype() == dtype ? t : castTensor(t, dtype);
}

/// Element strides of a contiguous tensor of shape `in` read as if broadcast
/// to `out` (right-aligned, 0 on broadcast and missing leading dims).
Shape broadcastStrides(const Shape& in, const Shape& out);

/// Fill the contiguous, allocated `out` (same dtype as `in`) with
///   out[idx] = in.data[in_offset + sum_d idx[d] * in_strides[d]]
/// where idx walks out.shape(). Strides may be 0 (broadcast) or negative (flip);
/// this one routine does permute, expand, slice, select and flip. Copies by element size.
void copyStrided(Tensor& out, const Tensor& in, int64_t in_offset, const Shape& in_strides);
/// A contiguous copy of `t` with its dims reordered: result.shape[d] = t.shape[dims[d]].
Tensor permuteCopy(const Tensor& t, const std::vector<int64_t>& dims);
/// permuteCopy into `out` (shaped as the permuted `t`).
void permuteInto(const Tensor& t, const std::vector<int64_t>& dims, Tensor& out);

/// Put on a hot loop function (a free function or function template, not a
/// lambda) to compile it twice, for x86-64-v3 (AVX2 + FMA) and for the
/// baseline the build targets (SSE2), the better one picked at load time.
/// Inline helpers it calls are compiled into each clone.
/// KILN_SIMD_CLONES_512 adds an AVX-512 clone (x86-64-v4), for the few
/// loops of transcendental math (exp in softmax rows, cross-entropy,
/// attention) where 16 lanes per instruction pay: a sum of exp over a
/// [32000] row takes 0.5 instead of 0.8-1.0 ns per element on Zen 4. The
/// clones compute the same bits (no FMA contraction, the same lanes).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(KILN_NO_SIMD_CLONES)
#define KILN_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#define KILN_SIMD_CLONES_512 __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define KILN_SIMD_CLONES
#define KILN_SIMD_CLONES_512
#endif

/// Work (elements) below which loops stay single-threaded.
inline constexpr int64_t kParallelGrain = 32768;

/// Work (elements, or elements times the inner loop's length) from which a
/// kernel's own `omp parallel for` over planes, rows or channels opens a
/// parallel region; below it the loop runs on the calling thread (a region
/// costs a pool wake-up). node_stages.h counts a node this small as one
/// that runs on one thread anyway.
inline constexpr int64_t kOmpMinWork = 16384;

/// Run fn(begin, end) over disjoint chunks covering [0, n): on OpenMP threads
/// when n >= grain (and not already inside a parallel region), else once
/// inline. The first exception thrown by any chunk is rethrown here.
/// Capture the data pointers a loop body uses by value: read through a
/// reference capture they may alias the stores and the loop will not vectorize.
template <class Fn>
void parallelFor(int64_t n, int64_t grain, Fn&& fn);

/// Walk every index of `shape` for N operands given by their element strides
/// (each of rank(shape)). Dims that are contiguous for every operand are merged
/// first, so a same-shape walk is a single run. Calls
///   fn(const int64_t* offsets, const int64_t* inner_strides, int64_t count)
/// once per run along the innermost merged dim: operand k's elements are at
/// offsets[k] + i * inner_strides[k] for i < count. Parallel over the output
/// when numel >= grain; runs on different threads never overlap in the index space.
template <size_t N, class Fn>
void forEachStrided(const Shape& shape, std::array<Shape, N> strides, Fn&& fn, int64_t grain = kParallelGrain);

/// Sum in double of term(i) for i in [0, n), the same on any number of
/// threads: fixed blocks of kSumBlock terms are summed in order, each block
/// on some thread, then the block sums in order.
inline constexpr int64_t kSumBlock = 8192;
template <class Term>
double blockedSum(int64_t n, Term&& term);

// ---- implementation --------------------------------------------------------

namespace detail {
using ChunkFn = void (*)(void* ctx, int64_t begin, int64_t end);
void parallelForImpl(int64_t n, int64_t grain, ChunkFn fn, void* ctx);
/// Merge adjacent dims of `shape` that every stride vector walks contiguously;
/// drops size-1 dims. A rank-0 or fully merged shape ends up with rank 1.
void coalesce(Shape& shape, Shape** strides, size_t n);
}  // namespace detail

template <class Fn>
void parallelFor(int64_t n, int64_t grain, Fn&& fn) {
  if (n <= 0) return;
  using F = std::remove_reference_t<Fn>;
  detail::parallelForImpl(
      n, grain, [](void* ctx, int64_t b, int64_t e) { (*static_cast<F*>(ctx))(b, e); },
      const_cast<void*>(static_cast<const void*>(&fn)));
}

template <size_t N, class Fn>
void forEachStrided(const Shape& shape_in, std::array<Shape, N> strides, Fn&& fn, int64_t grain) {
  Shape shape = shape_in;
  const int64_t total = numelOf(shape);
  if (total == 0) return;
  std::array<Shape*, N> ptrs;
  for (size_t k = 0; k < N; ++k) ptrs[k] = &strides[k];
  detail::coalesce(shape, ptrs.data(), N);
  const int64_t rank = static_cast<int64_t>(shape.size());
  const int64_t inner = shape[rank - 1];
  std::array<int64_t, N> inner_strides;
  for (size_t k = 0; k < N; ++k) inner_strides[k] = strides[k][rank - 1];

  parallelFor(total, grain, [&](int64_t begin, int64_t end) {
    // Multi-index of `begin` and the operand offsets there.
    std::vector<int64_t> idx(rank);
    std::array<int64_t, N> off{};
    int64_t rem = begin;
    for (int64_t d = rank - 1; d >= 0; --d) {
      idx[d] = rem % shape[d];
      rem /= shape[d];
      for (size_t k = 0; k < N; ++k) off[k] += idx[d] * strides[k][d];
    }
    int64_t pos = begin;
    while (pos < end) {
      int64_t count = std::min(inner - idx[rank - 1], end - pos);
      fn(static_cast<const int64_t*>(off.data()), static_cast<const int64_t*>(inner_strides.data()), count);
      pos += count;
      if (pos >= end) break;
      // Advance past the run: innermost dim wraps, carry into outer dims.
      for (size_t k = 0; k < N; ++k) off[k] += (count - 1) * inner_strides[k];
      idx[rank - 1] += count - 1;
      for (int64_t d = rank - 1; d >= 0; --d) {
        if (++idx[d] < shape[d]) {
          for (size_t k = 0; k < N; ++k) off[k] += strides[k][d];
          break;
        }
        for (size_t k = 0; k < N; ++k) off[k] -= (shape[d] - 1) * strides[k][d];
        idx[d] = 0;
      }
    }
  });
}

template <class Term>
double blockedSum(int64_t n, Term&& term) {
  if (n <= 0) return 0.0;
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  std::vector<double> partial(static_cast<size_t>(blocks));
  double* pp = partial.data();
  parallelFor(blocks, std::max<int64_t>(1, kParallelGrain / kSumBlock), [&term, pp, n](int64_t b, int64_t e) {
    for (int64_t blk = b; blk < e; ++blk) {
      double acc = 0;
      const int64_t end = std::min(n, (blk + 1) * kSumBlock);
      for (int64_t i = blk * kSumBlock; i < end; ++i) acc += term(i);
      pp[blk] = acc;
    }
  });
  double total = 0;
  for (double v : partial) total += v;
  return total;
}

}  // namespace kiln::cpu
