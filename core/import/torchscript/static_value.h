// What a TorchScript value becomes during import: either a tensor computed at
// run time (a Kiln Value behind a TensorSlot) or something known at import
// time (ints, floats, bools, strings, None, devices, lists and tuples of
// those, constant tensors, modules, functions). Shape arithmetic in traced
// graphs (aten::size -> prim::NumToTensor -> aten::Int) stays in the second
// kind, so no shape computation reaches the Kiln graph.
//
// Tensors keep PyTorch's aliasing: every TorchScript value that names the same
// tensor shares one TensorSlot, so an in-place op (x.add_(1), bn.running_mean
// updates) is seen through all of them. A view (slice, select, reshape,
// permute, expand) remembers its base and the steps that made it, so a write
// into the view can be written back into the base and a later read of a view
// sees writes made through the base. No torch headers here.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/ir.h"
#include "core/tensor.h"

namespace kiln::ts {

/// One step of a view chain, replayable on a Kiln value and on an index map.
struct ViewStep {
  enum class Kind : uint8_t { Slice, Select, Reshape, Permute, Expand };
  Kind kind = Kind::Reshape;
  int64_t dim = 0;             ///< Slice, Select (normalized)
  int64_t start = 0, end = 0;  ///< Slice bounds (normalized); Select: index in `start`
  int64_t step = 1;            ///< Slice
  std::vector<int64_t> ints;   ///< Reshape/Expand: resolved shape; Permute: dims
};

/// The storage behind one or more TorchScript tensor values.
struct TensorSlot {
  Value* value = nullptr;            ///< current contents (for a view: as of base_version)
  std::shared_ptr<TensorSlot> base;  ///< root slot when this is a view
  std::vector<ViewStep> steps;       ///< root -> this view
  uint64_t version = 0;              ///< bumped by every in-place write (roots only)
  uint64_t base_version = 0;         ///< root version `value` was read at
  /// Roots: which elements each in-place write covered (a bool mask over
  /// the root's shape; null: all of them), by the version it made, so a view
  /// that none of the later writes touched keeps its value (LSTMCell's traced
  /// gates: sigmoid_ on one chunk leaves the other chunks as they were).
  std::vector<std::pair<uint64_t, std::shared_ptr<const Tensor>>> writes;
  /// Views: the root elements this view reads (a bool mask, made on first need).
  std::shared_ptr<const Tensor> covers;
};

/// A TorchScript value at import time.
struct SV {
  enum class Kind : uint8_t {
    None,
    Bool,
    Int,
    Float,
    Str,
    Device,
    List,
    Tuple,
    Tensor,
    Const,
    Object,
    Function,
    Uninit,
    Unsupported  ///< the result of an op that could not be imported (kiln check), or computed from one
  };
  Kind kind = Kind::None;
  int64_t i = 0;                           ///< Bool (0/1), Int; Object/Function: handle into the walker's tables
  double f = 0;                            ///< Float
  std::string s;                           ///< Str, Device ("cpu"), Object: module path, Function: name
  std::shared_ptr<std::vector<SV>> items;  ///< List (shared: lists are mutable), Tuple
  std::shared_ptr<TensorSlot> slot;        ///< Tensor
  Tensor constant;                         ///< Const: a tensor known at import time
  bool wrapped = false;                    ///< Const from a Python number (prim::NumToTensor): promotes like a scalar

  static SV none() { return {}; }
  static SV boolean(bool b);
  static SV integer(int64_t v);
  static SV real(double v);
  static SV str(std::string v);
  static SV device(std::string v);
  static SV list(std::vector<SV> v);
  static SV tuple(std::vector<SV> v);
  static SV tensor(Value* v);
  static SV slotted(std::shared_ptr<TensorSlot> slot);
  static SV constTensor(Tensor t, bool wrapped = false);
  static SV object(int64_t handle, std::string path);
  static SV function(int64_t handle, std::string name);
  static SV uninit();
  static SV unsupported();
  /// Whether this is (or, for lists and tuples, holds) an Unsupported value.
  bool dependsOnUnsupported() const;

  bool isNone() const { return kind == Kind::None; }
  bool isNumber() const { return kind == Kind::Bool || kind == Kind::Int || kind == Kind::Float; }
  bool isTensorLike() const { return kind == Kind::Tensor || kind == Kind::Const; }
  bool isSequence() const { return kind == Kind::List || kind == Kind::Tuple; }
  /// A 0-d constant tensor: usable in shape arithmetic.
  bool isScalarConst() const { return kind == Kind::Const && constant.rank() == 0; }
  /// Bool/Int/Float or a one-element constant as a double.
  double number() const;
  /// The elements of a List/Tuple.
  const std::vector<SV>& elems() const;
  /// Static type name and value for messages: "int 3", "Tensor f32[2,3]", "list[3]".
  std::string describe() const;
};

/// PyTorch ScalarType codes (stable: they are stored in TorchScript archives).
std::optional<DType> dtypeFromScalarType(int64_t code);
int64_t scalarTypeOf(DType t);

}  // namespace kiln::ts
