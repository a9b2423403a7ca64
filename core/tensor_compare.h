// The project's parity measure between a tensor and a reference (PyTorch's):
//
//   error = max |actual - expected| / max |expected|
//
// i.e. the largest deviation relative to the reference output's largest
// magnitude (absolute when the reference is all zeros). NaN matches NaN and
// equal infinities match; anything else involving NaN or inf is an infinite
// error, as is a dtype or shape mismatch.
#pragma once

#include "core/tensor.h"

namespace kiln {

double parityError(const Tensor& actual, const Tensor& expected);

}  // namespace kiln
