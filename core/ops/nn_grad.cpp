// Gradient rules for the nn family's layers (see core/grad.h): conv2d (and
// conv2d_input_backward, the transposed convolution's forward), the
// 2-D pools, embedding and dropout, plus the backward ops they emit.
// (Normalization and softmax rules live in norm_grad.cpp.)
//
// Backward ops, all with CPU kernels in backend/cpu/kernels_*_grad.cpp:
//   conv2d_input_backward(g, weight) {input_shape, stride, padding, dilation, groups}
//   conv2d_weight_backward(g, x) {weight_shape, stride, padding, dilation, groups}
//   max_pool2d_backward(g, x) {the forward's window attributes}
//   avg_pool2d_backward(g) {input_shape, the forward's window attributes}
//   adaptive_avg_pool2d_backward(g) {input_shape}
//   adaptive_max_pool2d_backward(g, x)
//   embedding_backward(g, indices) {num_weights, padding_idx, scale_grad_by_freq}
// Max pools take x and recompute each window's argmax in the backward
// kernel instead of saving indices from the forward: the forward op keeps a
// single output (importers, kernels and fusions stay as they are), and the
// rescan costs what the forward's scan cost, while an index tensor would be
// as large as the output and live from forward to backward. The rescan
// applies PyTorch's CPU rule (first maximum in window scan order, a NaN
// wins, padding never does), so the routing matches PyTorch's indices.
// Average pools and embedding take the input's shape as an attribute so the
// forward input need not stay alive for the backward.
#include "core/grad.h"
#include "core/ops/op_helpers.h"

namespace kiln {
namespace {

using Ints = std::vector<int64_t>;  // the same type as Shape

void requireAtLeast(const Node& n, const Ints& v, const char* what, int64_t min) {
  for (int64_t x : v)
    if (x < min) opFail(n, std::string(what) + " " + shapeStr(v) + " must be at least " + std::to_string(min));
}

void requireFloating(const Node& n, size_t input) {
  if (!isFloating(n.input(input)->dtype()))
    opFail(n, "gradient input " + std::to_string(input) + " must be floating, got " + n.input(input)->type().str());
}

/// A shape attribute (input_shape, weight_shape): `rank` (or one of the
/// ranks 3/4 when rank is 0) non-negative dims.
Shape shapeAttr(const Node& n, const char* attr, int64_t rank) {
  const Ints& s = n.is(attr);
  const auto r = static_cast<int64_t>(s.size());
  if (rank ? r != rank : r != 3 && r != 4)
    opFail(n,
           std::string(attr) + " " + shapeStr(s) + " must have " + (rank ? std::to_string(rank) : "3 or 4") + " dims");
  requireAtLeast(n, s, attr, 0);
  return Shape(s.begin(), s.end());
}

// ---- conv2d backward ops ---------------------------------------------------------

/// Checks that x [N,C,H,W], weight [O,C/groups,kh,kw] and the output
/// gradient g [N,O,oh,ow] belong to one convolution with the node's attributes.
void checkConvShapes(const Node& n, const Shape& x, const Shape& w, const Shape& g) {
  auto stride = pair(n, "stride"), pad = pair(n, "padding"), dil = pair(n, "dilation");
  requireAtLeast(n, stride, "stride", 1);
  requireAtLeast(n, dil, "dilation", 1);
  requireAtLeast(n, pad, "padding", 0);
  if (x.size() != 4 || w.size() != 4 || g.size() != 4)
    opFail(n, "input " + shapeStr(x) + ", weight " + shapeStr(w) + " and gradient " + shapeStr(g) +
                  " must all have 4 dims");
  int64_t groups = n.i("groups");
  if (groups <= 0 || x[1] % groups || w[0] % groups || x[1] / groups != w[1])
    opFail(n, "input channels " + std::to_string(x[1]) + " do not match weight " + shapeStr(w) +
                  " with groups=" + std::to_string(groups));
  Shape expect = {x[0], w[0], pooledLength(x[2], w[2], stride[0], pad[0], dil[0], false),
                  pooledLength(x[3], w[3], stride[1], pad[1], dil[1], false)};
  if (g != expect)
    opFail(n, "gradient " + shapeStr(g) + " does not match the convolution output " + shapeStr(expect) + " of input " +
                  shapeStr(x) + " and weight " + shapeStr(w));
}

/// An activation shape in NCHW: channels_last nodes hold theirs as NHWC.
Shape asNchw(const Node& n, const Shape& s) {
  return channelsLast(n) ? nchwFromNhwc(s) : s;
}

std::vector<TensorType> inferConvInputBackward(const Node& n) {
  requireFloating(n, 0);
  Shape x = shapeAttr(n, "input_shape", 4);  // in the node's layout
  checkConvShapes(n, asNchw(n, x), n.input(1)->shape(), asNchw(n, n.input(0)->shape()));
  return {{n.input(0)->dtype(), x}};
}

std::vector<TensorType> inferConvWeightBackward(const Node& n) {
  requireFloating(n, 0);
  Shape w = shapeAttr(n, "weight_shape", 4);
  checkConvShapes(n, asNchw(n, n.input(1)->shape()), w, asNchw(n, n.input(0)->shape()));
  return {{n.input(0)->dtype(), w}};
}

/// Both conv backward ops do the forward's multiply-adds once more.
Cost convBackwardCost(const Node& n) {
  const Shape& w = n.is(Op::conv2d_weight_backward) ? n.is("weight_shape") : n.input(1)->shape();
  double per_out = 2.0 * static_cast<double>(w[1] * w[2] * w[3]);
  return {per_out * static_cast<double>(n.input(0)->type().numel()), ioBytes(n)};
}

// ---- pool backward ops -----------------------------------------------------------

/// Checks the window attributes as the forward does and that g has the pooled
/// shape of x (same leading dims; 3-D or 4-D).
void checkPooled(const Node& n, const Shape& x, const Shape& g, bool windowed) {
  if ((x.size() != 3 && x.size() != 4) || g.size() != x.size())
    opFail(n, "input " + shapeStr(x) + " and gradient " + shapeStr(g) + " must both have 3 or 4 dims");
  Shape expect = x;
  const size_t h = x.size() - 2;
  if (windowed) {
    auto k = pair(n, "kernel_size");
    auto stride = n.is("stride").empty() ? k : pair(n, "stride");
    auto pad = pair(n, "padding");
    Ints dil = {1, 1};
    if (n.def().findAttr("dilation")) dil = pair(n, "dilation");
    requireAtLeast(n, k, "kernel_size", 1);
    requireAtLeast(n, stride, "stride", 1);
    requireAtLeast(n, pad, "padding", 0);
    requireAtLeast(n, dil, "dilation", 1);
    if (pad[0] * 2 > k[0] || pad[1] * 2 > k[1]) opFail(n, "padding must be at most half the kernel size");
    bool ceil = n.i("ceil_mode") != 0;
    expect[h] = pooledLength(x[h], k[0], stride[0], pad[0], dil[0], ceil);
    expect[h + 1] = pooledLength(x[h + 1], k[1], stride[1], pad[1], dil[1], ceil);
  } else {
    // Adaptive: any output size >= 1 (the forward's output_size).
    expect[h] = g[h], expect[h + 1] = g[h + 1];
    requireAtLeast(n, {g[h], g[h + 1]}, "output size", 1);
  }
  if (g != expect) opFail(n, "gradient " + shapeStr(g) + " does not match the pooled shape " + shapeStr(expect));
}

/// max_pool2d_backward / adaptive_max_pool2d_backward (g, x) -> like x.
std::vector<TensorType> inferMaxPoolBackward(const Node& n) {
  requireFloating(n, 0);
  requireFloating(n, 1);
  checkPooled(n, n.input(1)->shape(), n.input(0)->shape(), n.is(Op::max_pool2d_backward));
  return {{n.input(0)->dtype(), n.input(1)->shape()}};
}

/// avg_pool2d_backward / adaptive_avg_pool2d_backward (g) -> input_shape.
std::vector<TensorType> inferAvgPoolBackward(const Node& n) {
  requireFloating(n, 0);
  Shape x = shapeAttr(n, "input_shape", 0);
  checkPooled(n, x, n.input(0)->shape(), n.is(Op::avg_pool2d_backward));
  return {{n.input(0)->dtype(), x}};
}

/// A pool backward reads each gradient once per window element (for the
/// windowed pools) and writes the input gradient.
Cost poolBackwardCost(const Node& n) {
  double window = 1;
  if (n.def().findAttr("kernel_size")) {
    auto k = pair(n, "kernel_size");
    window = static_cast<double>(k[0] * k[1]);
  } else {
    window = static_cast<double>(n.output()->type().numel()) /
             static_cast<double>(std::max<int64_t>(n.input(0)->type().numel(), 1));
  }
  return {window * static_cast<double>(n.input(0)->type().numel()), ioBytes(n)};
}

// ---- embedding backward ----------------------------------------------------------

std::vector<TensorType> inferEmbeddingBackward(const Node& n) {
  requireFloating(n, 0);
  const TensorType& g = n.input(0)->type();
  const TensorType& idx = n.input(1)->type();
  if (!isIntegral(idx.dtype)) opFail(n, "indices must be integers, got " + idx.str());
  int64_t rows = n.i("num_weights");
  if (rows < 0) opFail(n, "num_weights must be non-negative, got " + std::to_string(rows));
  Shape expect = idx.shape;
  if (g.rank() != idx.rank() + 1 || !std::equal(expect.begin(), expect.end(), g.shape.begin()))
    opFail(n, "gradient " + g.str() + " must be the indices' shape " + shapeStr(idx.shape) + " plus one dim");
  return {{g.dtype, {rows, g.shape.back()}}};
}

// ---- gradient rules --------------------------------------------------------------

/// The forward conv's window attributes, as explicit values.
AttrMap convAttrs(const Node& n) {
  AttrMap a = {{"stride", n.is("stride")},
               {"padding", n.is("padding")},
               {"dilation", n.is("dilation")},
               {"groups", n.i("groups")}};
  if (channelsLast(n)) a["channels_last"] = int64_t{1};
  return a;
}

void conv2dGrad(GradContext& c) {
  Value* g = c.grad();
  if (!g) return;
  const Node& n = c.node();
  if (c.needs(0)) {
    AttrMap a = convAttrs(n);
    a["input_shape"] = c.in(0)->shape();
    c.setGrad(0, c.op("conv2d_input_backward", {g, c.in(1)}, std::move(a)));
  }
  if (c.needs(1)) {
    AttrMap a = convAttrs(n);
    a["weight_shape"] = c.in(1)->shape();
    c.setGrad(1, c.op("conv2d_weight_backward", {g, c.in(0)}, std::move(a)));
  }
  // Bias: summed over batch and spatial dims (PyTorch: grad.sum({0, 2, 3})).
  const Ints spatial = channelsLast(n) ? Ints{0, 1, 2} : Ints{0, 2, 3};
  if (c.numInputs() == 3 && c.needs(2)) c.setGrad(2, c.op("sum", {g}, {{"dims", spatial}}));
}

/// conv2d_input_backward(x, w) is also the forward of a transposed
/// convolution (conv_transpose1d/2d lower to it), and bilinear: its adjoint
/// in x is conv2d, in w conv2d's weight gradient with the roles swapped
/// (the transposed convolution's input plays conv2d's output gradient):
///   dx = conv2d(gy, w),  dw = conv2d_weight_backward(x, gy).
void convInputBackwardGrad(GradContext& c) {
  Value* gy = c.grad();
  if (!gy) return;
  const Node& n = c.node();
  if (c.needs(0)) c.setGrad(0, c.op("conv2d", {gy, c.in(1)}, convAttrs(n)));
  if (c.needs(1)) {
    AttrMap a = convAttrs(n);
    a["weight_shape"] = c.in(1)->shape();
    c.setGrad(1, c.op("conv2d_weight_backward", {c.in(0), gy}, std::move(a)));
  }
}

/// The forward pool's attributes that the backward ops share (all explicit).
AttrMap poolAttrs(const Node& n, std::initializer_list<const char*> names) {
  AttrMap a;
  for (const char* name : names) a[name] = *n.attr(name);
  return a;
}

void maxPoolGrad(GradContext& c) {
  if (!c.grad() || !c.needs(0)) return;
  AttrMap a = poolAttrs(c.node(), {"kernel_size", "stride", "padding", "dilation", "ceil_mode"});
  c.setGrad(0, c.op("max_pool2d_backward", {c.grad(), c.in(0)}, std::move(a)));
}

void avgPoolGrad(GradContext& c) {
  if (!c.grad() || !c.needs(0)) return;
  AttrMap a =
      poolAttrs(c.node(), {"kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override"});
  a["input_shape"] = c.in(0)->shape();
  c.setGrad(0, c.op("avg_pool2d_backward", {c.grad()}, std::move(a)));
}

void adaptiveAvgPoolGrad(GradContext& c) {
  if (!c.grad() || !c.needs(0)) return;
  c.setGrad(0, c.op("adaptive_avg_pool2d_backward", {c.grad()}, {{"input_shape", c.in(0)->shape()}}));
}

void adaptiveMaxPoolGrad(GradContext& c) {
  if (!c.grad() || !c.needs(0)) return;
  c.setGrad(0, c.op("adaptive_max_pool2d_backward", {c.grad(), c.in(0)}));
}

/// Rows of the weight gradient accumulate the gradients of every position
/// that looked them up (scaled by 1 / the row's count in the batch with
/// scale_grad_by_freq); the padding_idx row (negative: none) gets nothing.
void embeddingGrad(GradContext& c) {
  if (!c.grad() || !c.needs(0)) return;
  c.setGrad(0, c.op("embedding_backward", {c.grad(), c.in(1)},
                    {{"num_weights", c.in(0)->shape()[0]},
                     {"padding_idx", c.node().i("padding_idx")},
                     {"scale_grad_by_freq", c.node().i("scale_grad_by_freq")}}));
}

/// Training: g * mask / (1 - p) (PyTorch's native_dropout_backward; p == 1
/// drops everything and the gradient is zero). Evaluation: identity.
void dropoutGrad(GradContext& c) {
  Value* g = c.grad(0);
  if (!g || !c.needs(0)) return;
  if (!c.node().i("training")) return c.setGrad(0, g);
  const double p = c.node().f("p");
  const double scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;
  Value* zero = c.scalar(0.0, g->dtype());
  Value* scaled = scale == 1.0 ? g : c.op("mul", {g, c.scalar(scale, g->dtype())});
  c.setGrad(0, c.op("where", {c.out(1), scaled, zero}));
}

}  // namespace

void registerNNGrads(OpTable& t) {
  const Ints ones = {1, 1}, zeros = {0, 0}, none;
  auto convSpec = [&](const char* shape_attr) {
    return std::vector<AttrSpec>{reqAttr(shape_attr, AttrKind::Ints), optAttr("stride", ones),
                                 optAttr("padding", zeros),           optAttr("dilation", ones),
                                 optAttr("groups", int64_t{1}),       optAttr("channels_last", int64_t{0})};
  };
  t.add({"conv2d_input_backward", "gradient of conv2d w.r.t. its input: (grad_output, weight) -> input_shape", 2, 2, 0,
         convSpec("input_shape"), inferConvInputBackward, convBackwardCost});
  t.add({"conv2d_weight_backward", "gradient of conv2d w.r.t. its weight: (grad_output, input) -> weight_shape", 2, 2,
         0, convSpec("weight_shape"), inferConvWeightBackward, convBackwardCost});
  t.add({"max_pool2d_backward",
         "gradient of max_pool2d: (grad_output, input); routes to each window's argmax",
         2,
         2,
         0,
         {reqAttr("kernel_size", AttrKind::Ints), optAttr("stride", none), optAttr("padding", zeros),
          optAttr("dilation", ones), optAttr("ceil_mode", int64_t{0})},
         inferMaxPoolBackward,
         poolBackwardCost});
  t.add({"avg_pool2d_backward",
         "gradient of avg_pool2d: (grad_output) -> input_shape",
         1,
         1,
         0,
         {reqAttr("input_shape", AttrKind::Ints), reqAttr("kernel_size", AttrKind::Ints), optAttr("stride", none),
          optAttr("padding", zeros), optAttr("ceil_mode", int64_t{0}), optAttr("count_include_pad", int64_t{1}),
          optAttr("divisor_override", int64_t{0})},
         inferAvgPoolBackward,
         poolBackwardCost});
  t.add({"adaptive_avg_pool2d_backward",
         "gradient of adaptive_avg_pool2d: (grad_output) -> input_shape",
         1,
         1,
         0,
         {reqAttr("input_shape", AttrKind::Ints)},
         inferAvgPoolBackward,
         poolBackwardCost});
  t.add({"adaptive_max_pool2d_backward",
         "gradient of adaptive_max_pool2d: (grad_output, input)",
         2,
         2,
         0,
         {},
         inferMaxPoolBackward,
         poolBackwardCost});
  t.add({"embedding_backward",
         "gradient of embedding's weight: (grad_output, indices) -> [num_weights, dim]; skips padding_idx",
         2,
         2,
         0,
         {reqAttr("num_weights", AttrKind::Int), optAttr("padding_idx", int64_t{-1}),
          optAttr("scale_grad_by_freq", int64_t{0})},
         inferEmbeddingBackward,
         nullptr});

  t.setGrad("conv2d", conv2dGrad);
  t.setGrad("conv2d_input_backward", convInputBackwardGrad);
  t.setGrad("max_pool2d", maxPoolGrad);
  t.setGrad("avg_pool2d", avgPoolGrad);
  t.setGrad("adaptive_avg_pool2d", adaptiveAvgPoolGrad);
  t.setGrad("adaptive_max_pool2d", adaptiveMaxPoolGrad);
  t.setGrad("embedding", embeddingGrad);
  t.setGrad("dropout", dropoutGrad);
}

}  // namespace kiln
