// Tensor: a contiguous host buffer with a TensorType. Used for weights,
// batches, constants and the reference CPU executor. Copies share the buffer
// (like torch.Tensor); use clone() for a deep copy.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "core/tensor_type.h"

namespace kiln {

class Tensor {
 public:
  Tensor() = default;
  /// Allocates zero-filled storage for `type`.
  explicit Tensor(TensorType type);
  Tensor(DType dtype, Shape shape) : Tensor(TensorType{dtype, std::move(shape)}) {}
  /// Allocates storage for `type` without clearing it: for kernels that write
  /// every element. (With KILN_POISON_ALLOC=1 in the environment the bytes are
  /// set to 0xFF instead, so tests catch a kernel that reads them.)
  static Tensor empty(TensorType type);
  /// Under KILN_POISON_ALLOC=1, sets every byte to 0xFF (NaN for floats), as
  /// empty() does: for buffers reused without allocating (the executor's
  /// arena). Otherwise does nothing.
  void poisonForTests();
  /// Wraps storage someone else allocated (e.g. a libtorch tensor kept alive
  /// by `buf`'s deleter, or a slot of an arena) without copying. `buf` must
  /// hold type.bytes() bytes, 64-byte aligned like Kiln's own buffers; no one
  /// else may write it while Kiln uses it (copies share the buffer).
  static Tensor adopt(TensorType type, std::shared_ptr<unsigned char[]> buf);

  /// Build an f32 tensor from values (tests and small constants).
  static Tensor fromFloats(Shape shape, const std::vector<float>& values);
  static Tensor fromInt64s(Shape shape, const std::vector<int64_t>& values);
  /// A 0-d tensor of `dtype` holding `value` (converted).
  static Tensor scalar(DType dtype, double value);

  bool defined() const { return buf_ != nullptr; }
  const TensorType& type() const { return type_; }
  DType dtype() const { return type_.dtype; }
  const Shape& shape() const { return type_.shape; }
  int64_t rank() const { return type_.rank(); }
  int64_t numel() const { return type_.numel(); }
  size_t bytes() const { return type_.bytes(); }

  void* raw() { return buf_.get(); }
  const void* raw() const { return buf_.get(); }
  template <typename T>
  T* data() {
    return static_cast<T*>(raw());
  }
  template <typename T>
  const T* data() const {
    return static_cast<const T*>(raw());
  }

  /// No other Tensor shares this buffer (so writing it changes nothing
  /// anyone else can see).
  bool uniquelyOwned() const { return buf_.use_count() == 1; }
  /// Deep copy.
  Tensor clone() const;
  /// Same buffer, new shape with equal numel (throws KilnException otherwise).
  Tensor reshaped(Shape shape) const;
  /// Element i converted to double (any dtype).
  double at(int64_t i) const;
  /// Store `v` (converted to this dtype) at element i.
  void set(int64_t i, double v);
  /// Elementwise conversion to another dtype.
  Tensor to(DType dtype) const;

 private:
  struct NoInit {};
  Tensor(TensorType type, NoInit);
  TensorType type_;
  std::shared_ptr<unsigned char[]> buf_;
};

/// Named tensors (weights, batches). Ordered so files and dumps are stable.
using TensorMap = std::map<std::string, Tensor>;

/// bfloat16 -> float: the 16 bits are float's upper half. Inline and
/// branch-free, like floatToBf16, so every bf16 loop (casts, elementwise,
/// norms) vectorizes; an out-of-line call per element made bf16 kernels
/// slower than f32 ones.
inline float bf16ToFloat(uint16_t v) {
  return std::bit_cast<float>(static_cast<uint32_t>(v) << 16);
}
/// float -> bfloat16, rounding to nearest even; every NaN becomes the quiet
/// NaN 0x7fc0 (as c10::BFloat16).
inline uint16_t floatToBf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? 0x7fc0u : rounded);
}
/// float <-> half conversions (round to nearest even).
float halfToFloat(uint16_t v);
uint16_t floatToHalf(float f);

}  // namespace kiln
