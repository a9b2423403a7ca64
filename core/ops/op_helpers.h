// Helpers shared by the op family files: declaring ops, broadcasting, and
// the index arithmetic (slices, pooling windows) that shape inference and
// kernels must agree on.
#pragma once

#include <string>
#include <vector>

#include "core/ir.h"
#include "core/op_table.h"
#include "core/result.h"

namespace kiln {

/// Attribute spec shorthands.
inline AttrSpec reqAttr(std::string name, AttrKind k) {
  return {std::move(name), k, std::nullopt};
}
inline AttrSpec optAttr(std::string name, Attr def) {
  AttrKind k = attrKind(def);
  return {std::move(name), k, std::move(def)};
}
/// Optional, without a default value (the op's infer decides what absent means).
inline AttrSpec unsetAttr(std::string name, AttrKind k) {
  return {std::move(name), k, std::nullopt, true};
}

/// linear's optional inputs: x, weight[, bias][, residual] -- the residual
/// (the fuse pass's epilogue: y = activation(x W^T + b) + residual) is the
/// last input when the `residual` attribute is 1.
inline Value* linearResidual(const Node& n) {
  return n.i("residual") != 0 ? n.input(n.numInputs() - 1) : nullptr;
}
inline Value* linearBias(const Node& n) {
  return n.numInputs() - (n.i("residual") != 0 ? 1 : 0) == 3 ? n.input(2) : nullptr;
}

/// Throws KilnException "<op @scope>: <msg>".
[[noreturn]] void opFail(const Node& n, const std::string& msg);

/// NumPy/PyTorch broadcast of two shapes; throws naming the node on mismatch.
Shape broadcastShapes(const Node& n, const Shape& a, const Shape& b);
/// The same without a node: the failure names the two shapes only.
Shape broadcastShapes(const Shape& a, const Shape& b);
/// Resolve a reshape target that may contain one -1 against `numel`.
Shape resolveReshape(const Node& n, const Shape& in, const std::vector<int64_t>& spec);
/// Resolve an expand target (-1 keeps the input size), checking broadcastability.
Shape resolveExpand(const Node& n, const Shape& in, const std::vector<int64_t>& spec);

/// Python-style slice bounds normalized against a dim of `size`.
struct SliceBounds {
  int64_t start, end, step, length;
};
SliceBounds normalizeSlice(int64_t size, int64_t start, int64_t end, int64_t step);

/// Output length of a pooling/convolution window along one axis (PyTorch's
/// formula, including ceil_mode's "last window must start inside the input").
int64_t pooledLength(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation, bool ceil_mode);

/// The output of a 2-D transposed convolution (conv_transpose2d) of x [N, C_in,
/// H, W] with weight [C_in, C_out/groups, kh, kw]: [N, C_out, Ho, Wo] with
/// Ho = (H - 1) * stride - 2 * padding + dilation * (kh - 1) + output_padding + 1.
/// The importers lower it to conv2d_input_backward with this input_shape.
/// Fails (kiln::fail) on a channel mismatch, an output_padding not smaller
/// than stride or dilation (PyTorch's rule) or a non-positive size.
Shape transposedConvOutput(const Shape& x, const Shape& w, const std::vector<int64_t>& stride,
                           const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation,
                           const std::vector<int64_t>& output_padding, int64_t groups);

/// Reduction axes from a `dims` attribute (empty = all), normalized and sorted.
std::vector<int64_t> reductionAxes(const Node& n, const std::vector<int64_t>& dims, int64_t rank);
/// Shape after reducing `axes`.
Shape reducedShape(const Shape& in, const std::vector<int64_t>& axes, bool keepdim);

/// A run of adjacent dims that are all kept or all reduced.
struct DimGroup {
  bool reduced;
  int64_t size;
};
/// A shape's dims merged into alternating kept / reduced runs, outermost
/// first; size-1 dims are dropped (they change nothing), size-0 dims kept.
/// Every reduction kernel walks its input by these runs (CPU and CUDA).
std::vector<DimGroup> groupDims(const Shape& s, const std::vector<int64_t>& axes);

/// Expect a 2-element int list (e.g. stride), expanding a 1-element one.
std::vector<int64_t> pair(const Node& n, const std::string& attr);

/// The `channels_last` layout (conv2d and its backward ops, group_norm and
/// group_norm_backward; set by passes/channels_last.cpp): their activation
/// tensors are [N, H, W, C] ([N, S..., C]) instead of [N, C, H, W]; weights
/// stay OIHW.
bool channelsLast(const Node& n);
/// The channel count of n's activation shape x: its last dim under
/// channels_last, else dim 1.
int64_t channelsOf(const Node& n, const Shape& x);
/// [N, H, W, C] -> [N, C, H, W] and back (4-D shapes).
Shape nchwFromNhwc(const Shape& s);
Shape nhwcFromNchw(const Shape& s);

// Common inference functions.
std::vector<TensorType> inferSameAsInput0(const Node& n);

}  // namespace kiln
