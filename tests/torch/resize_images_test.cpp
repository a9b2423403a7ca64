// The batch reader's image resize (core/data/resize_source.h, kiln train
// --image-size and --resize-schedule) against F.interpolate(mode="bilinear",
// align_corners=False): down and up, square and not, f32 and f64, sizes that
// do not divide each other; targets are left alone.
#include "core/data/resize_source.h"
#include "tests/torch/torch_compare.h"

namespace kiln::testing {
namespace {

namespace F = torch::nn::functional;

torch::Tensor torchResize(const torch::Tensor& x, int64_t h, int64_t w) {
  return F::interpolate(x, F::InterpolateFuncOptions()
                               .size(std::vector<int64_t>{h, w})
                               .mode(torch::kBilinear)
                               .align_corners(false));
}

TEST(ResizeImages, BilinearAsInterpolate) {
  torch::manual_seed(11);
  for (auto [in_h, in_w, h, w] : {std::array<int64_t, 4>{32, 32, 16, 16}, {32, 32, 24, 24}, {8, 8, 32, 32},
                                  {17, 23, 11, 29}, {224, 224, 160, 160}, {5, 7, 5, 7}, {1, 3, 4, 2}}) {
    for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
      auto x = torch::randn({2, 3, in_h, in_w}, torch::TensorOptions().dtype(dtype));
      Tensor got = resizeBilinear(fromTorch(x), h, w);
      // float64: rounding only. float32: the source index is computed in
      // float, whose rounding at index 200 (1.5e-5) moves the taps' weights
      // by as much; PyTorch's own f32 resize is 7.5e-6 from its f64 one at
      // 224 -> 160.
      expectClose(toTorch(got), torchResize(x, h, w), dtype == torch::kFloat32 ? 3e-5 : 1e-12,
                  std::to_string(in_h) + "x" + std::to_string(in_w) + " -> " + std::to_string(h) + "x" +
                      std::to_string(w));
    }
  }
}

TEST(ResizeImages, OnlyImageInputsChange) {
  TensorMap batch{{"input0", fromTorch(torch::randn({2, 3, 8, 8}))},
                  {"input1", fromTorch(torch::randn({2, 5}))},
                  {"target", fromTorch(torch::randint(0, 10, {2}))}};
  TensorMap out = resizeImages(batch, 4);
  EXPECT_EQ(out.at("input0").shape(), (Shape{2, 3, 4, 4}));
  EXPECT_EQ(out.at("input1").raw(), batch.at("input1").raw());
  EXPECT_EQ(out.at("target").raw(), batch.at("target").raw());
}

}  // namespace
}  // namespace kiln::testing
