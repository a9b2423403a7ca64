// unary_backward's per-element gradient loops as block functions, so the
// fused elementwise kernel (kernels_fused.cpp) runs a gradient inside a body
// with exactly the functor the one-op kernel uses
// (kernels_elementwise_grad.cpp).
#pragma once

#include <cstdint>
#include <functional>

#include "core/ir.h"

namespace kiln::cpu {

/// out[i] = d fn(v[i]) * g[i] over `n` elements.
template <class T>
using UnaryGradBlock = std::function<void(const T* g, const T* v, T* out, int64_t n)>;

/// The block loop for a unary_backward node (its `fn` and attributes), or
/// nullptr when the CPU has no gradient functor for that fn. T: float or double.
template <class T>
UnaryGradBlock<T> unaryBackwardBlock(const Node& n);

}  // namespace kiln::cpu
