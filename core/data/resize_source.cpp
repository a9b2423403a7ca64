#include "core/data/resize_source.h"

#include <algorithm>
#include <vector>

#include "core/dtype.h"

namespace kiln {
namespace {

/// PyTorch's source index of a bilinear, align_corners=False resize
/// (area_pixel_compute_source_index), computed in the image's type (float
/// for f32 and bf16 images, double for f64).
template <class T>
struct Taps {
  std::vector<int64_t> i0, i1;
  std::vector<T> l0, l1;
};

template <class T>
Taps<T> taps(int64_t in, int64_t out) {
  Taps<T> t;
  const T scale = static_cast<T>(in) / static_cast<T>(out);
  for (int64_t o = 0; o < out; ++o) {
    T real = scale * (static_cast<T>(o) + T(0.5)) - T(0.5);
    if (real < 0) real = 0;
    const int64_t i0 = std::min<int64_t>(static_cast<int64_t>(real), in - 1);
    const int64_t i1 = i0 + (i0 < in - 1 ? 1 : 0);
    const T l1 = real - static_cast<T>(i0);
    t.i0.push_back(i0);
    t.i1.push_back(i1);
    t.l1.push_back(l1);
    t.l0.push_back(T(1) - l1);
  }
  return t;
}

/// out[p, oy, ox] from the four taps, in T: float for f32 images, double
/// (through Tensor::at/set) for the others.
template <class T, class Read, class Write>
void interpolate(int64_t planes, int64_t H, int64_t W, int64_t h, int64_t w, Read read, Write write) {
  const Taps<T> ty = taps<T>(H, h), tx = taps<T>(W, w);
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t oy = 0; oy < h; ++oy) {
      const int64_t r0 = p * H * W + ty.i0[oy] * W, r1 = p * H * W + ty.i1[oy] * W;
      const T a0 = ty.l0[oy], a1 = ty.l1[oy];
      for (int64_t ox = 0; ox < w; ++ox) {
        const T b0 = tx.l0[ox], b1 = tx.l1[ox];
        const int64_t c0 = tx.i0[ox], c1 = tx.i1[ox];
        write((p * h + oy) * w + ox, a0 * (b0 * read(r0 + c0) + b1 * read(r0 + c1)) +
                                         a1 * (b0 * read(r1 + c0) + b1 * read(r1 + c1)));
      }
    }
}

bool isImage(const std::string& name, const Tensor& t) {
  return name.rfind("input", 0) == 0 && t.rank() == 4 && isFloating(t.dtype());
}

class Resized : public BatchSource {
 public:
  Resized(std::unique_ptr<BatchSource> source, int64_t size) : source_(std::move(source)), size_(size) {}
  Result<TensorMap> batch(int64_t step) override {
    auto b = source_->batch(step);
    if (!b) return b;
    return resizeImages(*b, size_);
  }
  std::string describe() const override {
    return source_->describe() + ", images resized to " + std::to_string(size_) + "x" + std::to_string(size_);
  }
  int64_t epochBatches() const override { return source_->epochBatches(); }

 private:
  std::unique_ptr<BatchSource> source_;
  int64_t size_;
};

}  // namespace

Tensor resizeBilinear(const Tensor& x, int64_t h, int64_t w) {
  const Shape& s = x.shape();
  if (s[2] == h && s[3] == w) return x;
  const int64_t planes = s[0] * s[1], H = s[2], W = s[3];
  Tensor out(x.dtype(), {s[0], s[1], h, w});
  if (x.dtype() == DType::F32) {  // in float, as PyTorch's kernel computes float images
    const float* in = x.data<float>();
    float* o = out.data<float>();
    interpolate<float>(planes, H, W, h, w, [&](int64_t i) { return in[i]; }, [&](int64_t i, float v) { o[i] = v; });
  } else {
    interpolate<double>(planes, H, W, h, w, [&](int64_t i) { return x.at(i); },
                        [&](int64_t i, double v) { out.set(i, v); });
  }
  return out;
}

TensorMap resizeImages(const TensorMap& batch, int64_t size) {
  TensorMap out = batch;
  for (auto& [name, t] : out)
    if (isImage(name, t)) t = resizeBilinear(t, size, size);
  return out;
}

std::unique_ptr<BatchSource> resizedSource(std::unique_ptr<BatchSource> source, int64_t size) {
  return std::make_unique<Resized>(std::move(source), size);
}

}  // namespace kiln
