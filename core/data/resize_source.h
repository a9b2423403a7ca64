// Resized image batches (kiln train --image-size, a recipe's
// --resize-schedule): every 4-D floating input [N, C, H, W] of a batch
// scaled to a new height and width by bilinear interpolation, as
// F.interpolate(mode="bilinear", align_corners=False) computes it, on
// whichever thread reads the batch (the prefetch thread when there is one).
// Targets are left as they are (class labels do not change with the size).
#pragma once

#include <memory>

#include "core/data/batch_source.h"

namespace kiln {

/// `x` [N, C, H, W] (f32, f64 or bf16) resized to [N, C, h, w]; the same
/// tensor when it has that size already.
Tensor resizeBilinear(const Tensor& x, int64_t h, int64_t w);

/// `batch` with every 4-D floating input (input0, input1, ...) resized to size x size.
TensorMap resizeImages(const TensorMap& batch, int64_t size);

/// `source`'s batches with their images resized to size x size.
std::unique_ptr<BatchSource> resizedSource(std::unique_ptr<BatchSource> source, int64_t size);

}  // namespace kiln
