#include "core/tensor.h"

#include <cmath>
#include <cstdlib>

#include "core/buffer_pool.h"
#include "core/result.h"

namespace kiln {

Tensor::Tensor(TensorType type, NoInit) : type_(std::move(type)) {
  for (int64_t d : type_.shape)
    if (d < 0) fail("negative dimension in tensor shape " + shapeStr(type_.shape));
  // Always allocate at least one byte so empty tensors are still "defined".
  size_t n = type_.bytes();
  buf_ = allocateBuffer(n);
}

Tensor::Tensor(TensorType type) : Tensor(std::move(type), NoInit{}) {
  if (bytes()) std::memset(raw(), 0, bytes());
}

Tensor Tensor::empty(TensorType type) {
  Tensor t(std::move(type), NoInit{});
  t.poisonForTests();
  return t;
}

void Tensor::poisonForTests() {
  static const bool poison = [] {
    const char* e = std::getenv("KILN_POISON_ALLOC");
    return e && *e == '1';
  }();
  if (poison && bytes()) std::memset(raw(), 0xFF, bytes());
}

Tensor Tensor::adopt(TensorType type, std::shared_ptr<unsigned char[]> buf) {
  if (!buf) fail("Tensor::adopt: no buffer for " + type.str());
  if (reinterpret_cast<uintptr_t>(buf.get()) % 64 != 0) fail("Tensor::adopt: buffer for " + type.str() + " is not 64-byte aligned");
  Tensor t;
  t.type_ = std::move(type);
  t.buf_ = std::move(buf);
  return t;
}

Tensor Tensor::fromFloats(Shape shape, const std::vector<float>& values) {
  Tensor t(DType::F32, std::move(shape));
  if (static_cast<int64_t>(values.size()) != t.numel()) fail("fromFloats: value count does not match shape");
  std::memcpy(t.raw(), values.data(), values.size() * sizeof(float));
  return t;
}

Tensor Tensor::fromInt64s(Shape shape, const std::vector<int64_t>& values) {
  Tensor t(DType::I64, std::move(shape));
  if (static_cast<int64_t>(values.size()) != t.numel()) fail("fromInt64s: value count does not match shape");
  std::memcpy(t.raw(), values.data(), values.size() * sizeof(int64_t));
  return t;
}

Tensor Tensor::scalar(DType dtype, double value) {
  Tensor t(dtype, {});
  t.set(0, value);
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(type_);
  if (bytes()) std::memcpy(t.raw(), raw(), bytes());
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  if (numelOf(shape) != numel())
    fail("cannot reshape " + type_.str() + " to " + shapeStr(shape));
  Tensor t = *this;
  t.type_.shape = std::move(shape);
  return t;
}

double Tensor::at(int64_t i) const {
  switch (dtype()) {
    case DType::F32: return data<float>()[i];
    case DType::F64: return data<double>()[i];
    case DType::F16: return halfToFloat(data<uint16_t>()[i]);
    case DType::BF16: return bf16ToFloat(data<uint16_t>()[i]);
    case DType::I64: return static_cast<double>(data<int64_t>()[i]);
    case DType::I32: return data<int32_t>()[i];
    case DType::I16: return data<int16_t>()[i];
    case DType::I8: return data<int8_t>()[i];
    case DType::U8: return data<uint8_t>()[i];
    case DType::Bool: return data<uint8_t>()[i] ? 1.0 : 0.0;
  }
  return 0;
}

void Tensor::set(int64_t i, double v) {
  switch (dtype()) {
    case DType::F32: data<float>()[i] = static_cast<float>(v); break;
    case DType::F64: data<double>()[i] = v; break;
    case DType::F16: data<uint16_t>()[i] = floatToHalf(static_cast<float>(v)); break;
    case DType::BF16: data<uint16_t>()[i] = floatToBf16(static_cast<float>(v)); break;
    case DType::I64: data<int64_t>()[i] = static_cast<int64_t>(v); break;
    case DType::I32: data<int32_t>()[i] = static_cast<int32_t>(v); break;
    case DType::I16: data<int16_t>()[i] = static_cast<int16_t>(v); break;
    case DType::I8: data<int8_t>()[i] = static_cast<int8_t>(v); break;
    case DType::U8: data<uint8_t>()[i] = static_cast<uint8_t>(v); break;
    case DType::Bool: data<uint8_t>()[i] = v != 0.0; break;
  }
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == this->dtype()) return clone();
  Tensor t(dtype, shape());
  const int64_t n = numel();
  if (this->dtype() == DType::F32 && dtype == DType::F64) {
    for (int64_t i = 0; i < n; ++i) t.data<double>()[i] = data<float>()[i];
  } else {
    for (int64_t i = 0; i < n; ++i) t.set(i, at(i));
  }
  return t;
}

float halfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) { mant <<= 1; --exp; }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00 | (mant ? 0x200 : 0));
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000;
    uint32_t shift = static_cast<uint32_t>(14 - exp);
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;
  return static_cast<uint16_t>(half);
}

}  // namespace kiln
