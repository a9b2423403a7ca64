// What the sparse allreduces (sparse_allreduce.cpp: blocks,
// sparse_row_allreduce.cpp: rows) share: finding the non-zero blocks of a
// dense tensor, adding one block into another at any byte offset, the
// owners' ranges, and the 4- or 8-byte index words they send.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/result.h"

namespace kiln::sparse_blocks {

template <typename T>
bool blockNonZero(const T* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != T(0)) return true;  // NaN != 0 holds; -0.0 != 0 does not
  return false;
}

template <typename T>
std::vector<uint64_t> findNonZeroBlocks(const void* data, size_t count, size_t block) {
  const T* p = static_cast<const T*>(data);
  std::vector<uint64_t> out;
  for (size_t start = 0, k = 0; start < count; start += block, ++k)
    if (blockNonZero(p + start, std::min(block, count - start))) out.push_back(k);
  return out;
}

/// The non-zero blocks of a tensor of one of adderFor's dtypes.
inline std::vector<uint64_t> nonZeroBlocks(const void* data, size_t count, size_t block, DType dtype) {
  switch (dtype) {
    case DType::F32:
      return findNonZeroBlocks<float>(data, count, block);
    case DType::F64:
      return findNonZeroBlocks<double>(data, count, block);
    case DType::I32:
      return findNonZeroBlocks<int32_t>(data, count, block);
    default:
      return findNonZeroBlocks<int64_t>(data, count, block);
  }
}

// out[i] += src[i] for n elements; both sit at any byte offset of a packed
// buffer, hence memcpy. Integers wrap like the dense allreduce does in
// practice, without signed-overflow UB.
template <typename T>
void addBlock(uint8_t* out, const uint8_t* src, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    T a, b;
    std::memcpy(&a, out + i * sizeof(T), sizeof(T));
    std::memcpy(&b, src + i * sizeof(T), sizeof(T));
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      a = static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      a += b;
    }
    std::memcpy(out + i * sizeof(T), &a, sizeof(T));
  }
}

using AddFn = void (*)(uint8_t*, const uint8_t*, size_t);

/// The adder of `dtype` (f32, f64, i32, i64); fails naming `who` otherwise.
inline AddFn adderFor(DType dtype, const char* who) {
  switch (dtype) {
    case DType::F32:
      return addBlock<float>;
    case DType::F64:
      return addBlock<double>;
    case DType::I32:
      return addBlock<int32_t>;
    case DType::I64:
      return addBlock<int64_t>;
    default:
      fail(std::string(who) + ": dtype " + std::string(dtypeName(dtype)) +
           " is not supported (f32, f64, i32, i64; use the dense allreduceSum for f16/bf16)");
  }
}

/// The first of `total` blocks (or rows) rank q of n owns; q = n: `total`.
inline uint64_t ownerBegin(uint64_t total, int q, int n) {
  return static_cast<uint64_t>(static_cast<unsigned __int128>(total) * static_cast<unsigned>(q) /
                               static_cast<unsigned>(n));
}

/// Word j of an array of `bytes`-byte (4 or 8) unsigned words at any byte
/// offset: written, and read back.
inline void putWord(uint8_t* p, size_t j, uint64_t v, size_t bytes) {
  const uint32_t v32 = static_cast<uint32_t>(v);
  std::memcpy(p + j * bytes, bytes == 4 ? static_cast<const void*>(&v32) : &v, bytes);
}
inline uint64_t getWord(const uint8_t* p, size_t j, size_t bytes) {
  if (bytes == 8) {
    uint64_t v;
    std::memcpy(&v, p + j * 8, 8);
    return v;
  }
  uint32_t v32;
  std::memcpy(&v32, p + j * 4, 4);
  return v32;
}

}  // namespace kiln::sparse_blocks
