// What a gradient rule sees. The autodiff pass (passes/autodiff.cpp) walks
// the forward nodes in reverse and, for each node a gradient flows through,
// calls the op's GradFn with a GradContext: the forward node, the gradient of
// each of its outputs (nullptr where none flows: zero), and which inputs need
// a gradient. The rule emits ordinary graph nodes (forward ops or the
// *_backward ops) through the builders below and hands each input gradient to
// setGrad; the pass sums gradients of values used more than once.
//
// Rules must not assume a gradient exists for every output (multi-output ops)
// and should skip the work for inputs where needs(i) is false.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/ir.h"

namespace kiln {

class GradContext {
 public:
  GradContext(Graph& graph, const Node& node, std::vector<Value*> output_grads, std::vector<bool> needs)
      : graph_(graph), node_(node), out_grads_(std::move(output_grads)), needs_(std::move(needs)),
        in_grads_(node.numInputs(), nullptr) {}

  const Node& node() const { return node_; }
  Graph& graph() { return graph_; }
  /// Forward input / output values.
  Value* in(size_t i) const { return node_.input(i); }
  Value* out(size_t i = 0) const { return node_.output(i); }
  size_t numInputs() const { return node_.numInputs(); }

  /// Gradient of the loss w.r.t. output `i`, or nullptr when none flows.
  Value* grad(size_t i = 0) const { return out_grads_.at(i); }
  /// grad(i), materialized as zeros when none flows (for rules that need all).
  Value* gradOrZeros(size_t i);
  /// Whether input `i` needs a gradient (it depends on a parameter).
  bool needs(size_t i) const { return i < needs_.size() && needs_[i]; }

  /// Hand over the gradient of input `i`. Its shape must equal the input's;
  /// a floating dtype that differs is cast (type promotion in the forward).
  void setGrad(size_t i, Value* g);
  /// Same, but first sums `g` down to the input's shape (undoing broadcasting).
  void setGradBroadcast(size_t i, Value* g);
  const std::vector<Value*>& inputGrads() const { return in_grads_; }

  // ---- builders: nodes carry the forward node's scope and a provenance
  // ---- "grad of <op @scope> (<its provenance>)" so tools can line them up.
  Value* op(std::string_view op, std::vector<Value*> inputs, AttrMap attrs = {});
  Node* opNode(std::string_view op, std::vector<Value*> inputs, AttrMap attrs = {});
  /// 0-d constant of dtype `dt` (a `full` node).
  Value* scalar(double v, DType dt);
  /// Constant tensor of type `t` filled with `v`.
  Value* fill(const TensorType& t, double v);
  /// Sum `g` over the dims that broadcasting added or expanded so it gets `shape`.
  Value* sumTo(Value* g, const Shape& shape);
  /// Cast `v` to `dt` (no node when it already is).
  Value* castTo(Value* v, DType dt);

 private:
  Graph& graph_;
  const Node& node_;
  std::vector<Value*> out_grads_;
  std::vector<bool> needs_;
  std::vector<Value*> in_grads_;
};

/// Whether values of this dtype carry gradients (floating point only).
bool isDifferentiable(DType dt);

}  // namespace kiln
