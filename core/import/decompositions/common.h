// Decompositions of aten operators into Kiln ops that both importers share
// (TorchScript: core/import/torchscript, FX: core/import/fx; the loss pass
// too), so a model imports to the same graph whichever way it was exported.
// One header per concern in this directory: common.h (this: the contract and
// small helpers), math.h (elementwise and reductions), loss.h, resample.h,
// nn.h (convolution, attention, norms, einsum), index.h (topk, advanced
// indexing, scatters), conv3d.h (3-D convolution and pooling).
//
// Each function takes a lowering context Cx with
//   Value* emit(std::string_view op, std::vector<Value*> inputs, AttrMap attrs = {});
//   Node* emitNode(std::string_view op, std::vector<Value*> inputs, AttrMap attrs = {});
//   Value* scalar(double value, DType dtype);   // a 0-d constant
//   Value* cast(Value* v, DType dtype);         // v itself when it has dtype
//   Value* constInput(const Tensor& t);          // a tensor known at import time
// and returns the value that replaces the aten op's result. Arguments are
// already decoded (the importers read them positionally or by name); shape
// errors go through kiln::fail, which the importers report with the node.
#pragma once

#include <string>
#include <vector>

#include "core/ir.h"
#include "core/ops/op_helpers.h"
#include "core/result.h"
#include "core/tensor.h"

namespace kiln::decomp {


/// 'text' for messages.
inline std::string quoteText(const std::string& s) { return "'" + s + "'"; }

/// An int64 index vector as a constant input.
template <class Cx>
Value* indexConst(Cx& cx, const std::vector<int64_t>& idx) {
  return cx.constInput(Tensor::fromInt64s({static_cast<int64_t>(idx.size())}, idx));
}

/// Weights of shape [1, .., w.size(), .., 1] along `dim` of a rank-`rank` tensor, as a constant input.
template <class Cx>
Value* weightConst(Cx& cx, const std::vector<double>& w, int64_t dim, int64_t rank, DType t) {
  Shape s(static_cast<size_t>(rank), 1);
  s[dim] = static_cast<int64_t>(w.size());
  Tensor tw(t, s);
  for (size_t k = 0; k < w.size(); ++k) tw.set(static_cast<int64_t>(k), w[k]);
  return cx.constInput(tw);
}

/// `x` reshaped to `s` unless it has that shape already.
template <class Cx>
Value* reshapedTo(Cx& cx, Value* x, const Shape& s) {
  return x->shape() == s ? x : cx.emit("reshape", {x}, {{"shape", s}});
}

/// `v` broadcast to `s` unless it has that shape already.
template <class Cx>
Value* expandedTo(Cx& cx, Value* v, const Shape& s) {
  return v->shape() == s ? v : cx.emit("expand", {v}, {{"shape", s}});
}

}  // namespace kiln::decomp
