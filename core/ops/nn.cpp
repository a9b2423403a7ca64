// Neural-network layers: convolution, pooling, normalization (batch, layer,
// group), embedding, dropout, softmax. BatchNorm in training mode has three
// outputs: y and the updated running mean and variance (PyTorch's momentum
// update with the unbiased batch variance); importers route those to
// BufferUpdate graph outputs. Dropout in training mode also returns its mask.
#include "core/ops/op_helpers.h"

namespace kiln {
namespace {

/// Window parameters must be sane before any arithmetic: stride/dilation/kernel
/// >= 1 and padding >= 0 (a hostile file could otherwise divide by zero).
void requireWindow(const Node& n, const std::vector<int64_t>& v, const char* what, int64_t min) {
  for (int64_t x : v)
    if (x < min) opFail(n, std::string(what) + " " + shapeStr(v) + " must be at least " + std::to_string(min));
}

void requireRank(const Node& n, size_t input, int64_t rank, const char* what) {
  if (n.input(input)->type().rank() != rank)
    opFail(n, std::string(what) + " must have " + std::to_string(rank) + " dims, got " +
                  n.input(input)->type().str());
}

std::vector<TensorType> inferConv2d(const Node& n) {
  requireRank(n, 0, 4, "input");
  requireRank(n, 1, 4, "weight");
  const bool nhwc = channelsLast(n);
  const Shape x = nhwc ? nchwFromNhwc(n.input(0)->shape()) : n.input(0)->shape();
  const Shape& w = n.input(1)->shape();
  auto stride = pair(n, "stride"), pad = pair(n, "padding"), dil = pair(n, "dilation");
  requireWindow(n, stride, "stride", 1);
  requireWindow(n, dil, "dilation", 1);
  requireWindow(n, pad, "padding", 0);
  int64_t groups = n.i("groups");
  if (groups <= 0 || x[1] % groups || w[0] % groups || x[1] / groups != w[1])
    opFail(n, "input channels " + std::to_string(x[1]) + " do not match weight " + n.input(1)->type().str() +
                  " with groups=" + std::to_string(groups));
  if (n.numInputs() == 3 && n.input(2)->shape() != Shape{w[0]})
    opFail(n, "bias " + n.input(2)->type().str() + " does not match " + std::to_string(w[0]) + " output channels");
  int64_t oh = pooledLength(x[2], w[2], stride[0], pad[0], dil[0], false);
  int64_t ow = pooledLength(x[3], w[3], stride[1], pad[1], dil[1], false);
  if (oh <= 0 || ow <= 0) opFail(n, "kernel larger than padded input " + n.input(0)->type().str());
  const Shape y = {x[0], w[0], oh, ow};
  return {{n.input(0)->dtype(), nhwc ? nhwcFromNchw(y) : y}};
}

Cost conv2dCost(const Node& n) {
  const Shape& w = n.input(1)->shape();
  double per_out = 2.0 * static_cast<double>(w[1] * w[2] * w[3]);
  return {per_out * static_cast<double>(n.output()->type().numel()), ioBytes(n)};
}

std::vector<TensorType> inferPool2d(const Node& n) {
  const TensorType& in = n.input(0)->type();
  if (in.rank() != 4 && in.rank() != 3) opFail(n, "input must have 3 or 4 dims, got " + in.str());
  auto k = pair(n, "kernel_size");
  auto stride = n.is("stride").empty() ? k : pair(n, "stride");
  auto pad = pair(n, "padding");
  std::vector<int64_t> dil = {1, 1};
  if (n.def().findAttr("dilation")) dil = pair(n, "dilation");
  requireWindow(n, k, "kernel_size", 1);
  requireWindow(n, stride, "stride", 1);
  requireWindow(n, pad, "padding", 0);
  requireWindow(n, dil, "dilation", 1);
  bool ceil = n.i("ceil_mode") != 0;
  if (pad[0] * 2 > k[0] || pad[1] * 2 > k[1]) opFail(n, "padding must be at most half the kernel size");
  TensorType out = in;
  size_t h = in.shape.size() - 2;
  out.shape[h] = pooledLength(in.shape[h], k[0], stride[0], pad[0], dil[0], ceil);
  out.shape[h + 1] = pooledLength(in.shape[h + 1], k[1], stride[1], pad[1], dil[1], ceil);
  if (out.shape[h] <= 0 || out.shape[h + 1] <= 0) opFail(n, "output would be empty for input " + in.str());
  return {out};
}

std::vector<TensorType> inferAdaptivePool(const Node& n) {
  TensorType out = n.input(0)->type();
  if (out.rank() != 4 && out.rank() != 3) opFail(n, "input must have 3 or 4 dims, got " + out.str());
  auto size = pair(n, "output_size");
  requireWindow(n, size, "output_size", 1);
  out.shape[out.shape.size() - 2] = size[0];
  out.shape[out.shape.size() - 1] = size[1];
  return {out};
}

std::vector<TensorType> inferBatchNorm(const Node& n) {
  const TensorType& x = n.input(0)->type();
  if (x.rank() < 2) opFail(n, "input must have at least 2 dims, got " + x.str());
  for (size_t i = 1; i < 5; ++i)
    if (n.input(i)->shape() != Shape{x.shape[1]})
      opFail(n, "parameter " + std::to_string(i) + " " + n.input(i)->type().str() + " does not match " +
                    std::to_string(x.shape[1]) + " channels");
  if (n.i("training")) return {x, n.input(3)->type(), n.input(4)->type()};
  return {x};
}

std::vector<TensorType> inferLayerNorm(const Node& n) {
  const TensorType& x = n.input(0)->type();
  const auto& ns = n.is("normalized_shape");
  if (ns.size() > x.shape.size() || !std::equal(ns.begin(), ns.end(), x.shape.end() - static_cast<long>(ns.size())))
    opFail(n, "normalized_shape " + shapeStr(ns) + " does not match the end of " + x.str());
  for (size_t i = 1; i < n.numInputs(); ++i)
    if (n.input(i)->shape() != ns) opFail(n, "weight/bias " + n.input(i)->type().str() + " must have shape " + shapeStr(ns));
  return {x};
}

std::vector<TensorType> inferGroupNorm(const Node& n) {
  const TensorType& x = n.input(0)->type();
  int64_t g = n.i("num_groups");
  if (x.rank() < 2 || g <= 0 || channelsOf(n, x.shape) % g)
    opFail(n, "channels of " + x.str() + " not divisible into groups");
  for (size_t i = 1; i < 3; ++i)
    if (n.input(i)->shape() != Shape{channelsOf(n, x.shape)}) opFail(n, "weight/bias must have one entry per channel");
  return {x};
}

std::vector<TensorType> inferEmbedding(const Node& n) {
  const TensorType& w = n.input(0)->type();
  const TensorType& idx = n.input(1)->type();
  if (w.rank() != 2) opFail(n, "weight must be 2-D, got " + w.str());
  if (!isIntegral(idx.dtype)) opFail(n, "indices must be integers, got " + idx.str());
  Shape out = idx.shape;
  out.push_back(w.shape[1]);
  return {{w.dtype, out}};
}

std::vector<TensorType> inferDropout(const Node& n) {
  double p = n.f("p");
  if (p < 0 || p > 1) opFail(n, "probability must be in [0, 1]");
  if (n.i("training")) return {n.input(0)->type(), {DType::Bool, n.input(0)->shape()}};
  return {n.input(0)->type()};
}

std::vector<TensorType> inferSoftmax(const Node& n) {
  const TensorType& x = n.input(0)->type();
  if (!isFloating(x.dtype)) opFail(n, "needs a floating-point input, got " + x.str());
  normalizeAxis(n.i("dim"), x.rank());
  return {x};
}

Cost normCost(const Node& n) { return {8.0 * static_cast<double>(n.input(0)->type().numel()), ioBytes(n)}; }

}  // namespace

void registerNNOps(OpTable& t) {
  const std::vector<int64_t> ones = {1, 1}, zeros = {0, 0}, none;
  t.add({"conv2d", "2-D convolution (NCHW, or NHWC with channels_last=1; weight OIHW); bias optional", 2, 3, 0,
         {optAttr("stride", ones), optAttr("padding", zeros), optAttr("dilation", ones), optAttr("groups", int64_t{1}),
          optAttr("channels_last", int64_t{0})},
         inferConv2d, conv2dCost});
  t.add({"max_pool2d", "max pooling (NCHW); stride [] means kernel_size", 1, 1, 0,
         {reqAttr("kernel_size", AttrKind::Ints), optAttr("stride", none), optAttr("padding", zeros),
          optAttr("dilation", ones), optAttr("ceil_mode", int64_t{0})},
         inferPool2d, nullptr});
  t.add({"avg_pool2d", "average pooling (NCHW); divisor_override 0 means none", 1, 1, 0,
         {reqAttr("kernel_size", AttrKind::Ints), optAttr("stride", none), optAttr("padding", zeros),
          optAttr("ceil_mode", int64_t{0}), optAttr("count_include_pad", int64_t{1}),
          optAttr("divisor_override", int64_t{0})},
         inferPool2d, nullptr});
  t.add({"adaptive_avg_pool2d", "average pooling to a fixed output size", 1, 1, 0,
         {reqAttr("output_size", AttrKind::Ints)}, inferAdaptivePool, nullptr});
  t.add({"adaptive_max_pool2d", "max pooling to a fixed output size", 1, 1, 0,
         {reqAttr("output_size", AttrKind::Ints)}, inferAdaptivePool, nullptr});
  t.add({"batch_norm", "(x, weight, bias, running_mean, running_var); training adds new running stats outputs", 5, 5, 0,
         {optAttr("training", int64_t{0}), optAttr("momentum", 0.1), optAttr("eps", 1e-5)}, inferBatchNorm, normCost});
  t.add({"layer_norm", "(x, weight, bias) over the trailing normalized_shape", 3, 3, 0,
         {reqAttr("normalized_shape", AttrKind::Ints), optAttr("eps", 1e-5)}, inferLayerNorm, normCost});
  t.add({"group_norm", "(x, weight, bias) with num_groups channel groups; x [N, C, ...], or [N, ..., C] with "
         "channels_last=1", 3, 3, 0,
         {reqAttr("num_groups", AttrKind::Int), optAttr("eps", 1e-5), optAttr("channels_last", int64_t{0})},
         inferGroupNorm, normCost});
  t.add({"embedding", "(weight, indices) -> rows of weight", 2, 2, 0,
         {optAttr("padding_idx", int64_t{-1}), optAttr("scale_grad_by_freq", int64_t{0})},
         inferEmbedding, nullptr});
  t.add({"dropout", "zero with probability p and scale by 1/(1-p); training adds the bool keep-mask output", 1, 1,
         kRandom, {optAttr("p", 0.5), optAttr("training", int64_t{1})}, inferDropout, nullptr});
  t.add({"softmax", "softmax along dim", 1, 1, 0, {reqAttr("dim", AttrKind::Int)}, inferSoftmax, normCost});
  t.add({"log_softmax", "log(softmax) along dim", 1, 1, 0, {reqAttr("dim", AttrKind::Int)}, inferSoftmax, normCost});
}

}  // namespace kiln
