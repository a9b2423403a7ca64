// The op table: the single source of truth for every op Kiln knows. Each op
// family (core/ops/*.cpp) registers its ops with arity, attributes and
// defaults, traits, shape inference and cost. Kernels live in backend/ and
// look ops up by name.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/attribute.h"
#include "core/op_names.h"
#include "core/tensor_type.h"

namespace kiln {

class Node;
class GradContext;

/// Op traits (bit flags).
enum OpTrait : uint32_t {
  kElementwise = 1u << 0,  ///< output[i] depends on input[i] only (with broadcasting)
  kReduction = 1u << 1,    ///< reduces over some axes
  kView = 1u << 2,         ///< only moves/reinterprets data (reshape, permute, slice)
  kCollective = 1u << 3,   ///< communicates across ranks
  kRandom = 1u << 4,       ///< draws random numbers
  kSideEffect = 1u << 5,   ///< must not be removed or reordered freely
  kSource = 1u << 6,       ///< takes no tensor inputs (full, arange)
  /// Output 0 has an input's shape and each of its elements is written only
  /// after every read of the inputs' elements at that index (a reduction per
  /// slice first, then an elementwise pass over it: batch_norm_backward), so
  /// it may be written over an input like an elementwise result.
  kOutput0OverInput = 1u << 7,
};

/// Work estimate of one node.
struct Cost {
  double flops = 0;  ///< floating-point operations (a multiply-add counts 2)
  double bytes = 0;  ///< bytes read plus bytes written
};

/// One declared attribute: its kind and (if optional) its default.
struct AttrSpec {
  std::string name;
  AttrKind kind;
  std::optional<Attr> default_value;  ///< nullopt: required (unless `optional`)
  /// Without a default, the attribute may still be left out: the op then
  /// applies its own rule (cross_entropy's dtype: the logits').
  bool optional = false;
};

/// Shape/dtype inference: output types from a node's inputs and attributes.
/// Throws KilnException with a message saying what is wrong.
using InferFn = std::vector<TensorType> (*)(const Node&);
using CostFn = Cost (*)(const Node&);
/// Gradient rule (reverse mode): reads the output gradients from `ctx` and
/// emits nodes that compute the gradient of each input that needs one. See
/// core/grad.h. Rules live beside their family in core/ops/*_grad.cpp.
using GradFn = void (*)(GradContext& ctx);

struct OpDef {
  std::string name;
  std::string summary;
  int min_inputs = 0;
  int max_inputs = 0;  ///< -1: variadic
  uint32_t traits = 0;
  std::vector<AttrSpec> attrs;
  InferFn infer = nullptr;
  CostFn cost = nullptr;  ///< nullptr: defaultCost
  /// Reverse-mode rule; nullptr with an empty `no_grad_reason` means the op has
  /// no rule yet and autodiff reports it when a gradient must flow through.
  GradFn grad = nullptr;
  /// Set for ops whose gradient is zero or undefined by nature (comparisons,
  /// floor, argmax, sources): autodiff lets no gradient through, silently.
  std::string no_grad_reason;
  /// The name as a symbol (set by OpTable::add from core/op_names.h).
  Op id{};

  bool has(OpTrait t) const { return (traits & t) != 0; }
  const AttrSpec* findAttr(const std::string& n) const;
};

/// Registry of all ops.
class OpTable {
 public:
  /// The table with every family registered.
  static const OpTable& get();
  const OpDef* find(std::string_view name) const;
  const std::map<std::string, OpDef, std::less<>>& all() const { return ops_; }
  /// Register an op (duplicate names abort: a programming error).
  void add(OpDef def);
  /// Attach a gradient rule to a registered op (unknown names abort).
  void setGrad(std::string_view op, GradFn fn);
  /// Declare that no gradient flows through `op`, and why.
  void setNoGrad(std::string_view op, std::string reason);

 private:
  std::map<std::string, OpDef, std::less<>> ops_;
};

/// Cost of a node: its op's cost function or defaultCost.
Cost nodeCost(const Node& n);
/// One flop per output element; bytes = all inputs + all outputs.
Cost defaultCost(const Node& n);
/// Bytes of all inputs plus outputs of a node.
double ioBytes(const Node& n);

// Family registration (core/ops/*.cpp); called once by OpTable::get().
void registerElementwiseOps(OpTable& t);
void registerReductionOps(OpTable& t);
void registerShapeOps(OpTable& t);
void registerLinalgOps(OpTable& t);
void registerNNOps(OpTable& t);
void registerLossOps(OpTable& t);
void registerOptimizerOps(OpTable& t);
void registerCollectiveOps(OpTable& t);  // allreduce, broadcast (data parallel)
void registerRowSparseOps(OpTable& t);   // row-sparse embedding gradients (data parallel)

// Gradient rules (core/ops/*_grad.cpp); called after every op is registered.
void registerElementwiseGrads(OpTable& t);
void registerReductionGrads(OpTable& t);
void registerShapeGrads(OpTable& t);
void registerLinalgGrads(OpTable& t);
void registerNNGrads(OpTable& t);    // conv, pooling, embedding, dropout
void registerNormGrads(OpTable& t);  // batch/layer/group norm, softmax, log_softmax
void registerLossGrads(OpTable& t);
void registerFusedOps(OpTable& t);

}  // namespace kiln
