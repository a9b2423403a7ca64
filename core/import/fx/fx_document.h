// The FX dump (docs/fx-format.md) as typed C++ data. parseFxDocument checks
// every JSON type, required field, name and shape once, so the importer and
// the lowering rules never look at raw JSON: a hostile or truncated file
// fails here with a message naming the JSON path ("nodes[3].args[1]: ...").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor_type.h"

namespace kiln::fx {

/// Largest element count of any tensor the importer accepts (2^40). Keeps all
/// shape arithmetic in Kiln's inference far from int64 overflow.
constexpr int64_t kMaxElements = kMaxTensorElements;
/// Largest JSON nesting depth accepted (real dumps nest about 6 deep).
constexpr size_t kMaxJsonDepth = 64;

/// One encoded argument or default value (see "Argument encoding").
struct FxArg {
  enum class Kind : uint8_t { None, Bool, Int, Float, String, Node, List, Tuple, DType, Device, MemoryFormat, Layout };
  Kind kind = Kind::None;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;  ///< String; Node: the referenced name; Device/MemoryFormat/Layout: the spelling
  DType dtype = DType::F32;
  std::vector<FxArg> items;  ///< List, Tuple

  bool isNone() const { return kind == Kind::None; }
  bool isNumber() const { return kind == Kind::Bool || kind == Kind::Int || kind == Kind::Float; }
};
/// "int", "list", "node reference", ... for messages.
std::string argKindName(FxArg::Kind k);

/// Result metadata of a node (`val`).
struct FxVal {
  enum class Kind : uint8_t { None, Tensor, Items, Scalar, Other };
  Kind kind = Kind::None;
  std::string dtype_name;       ///< Tensor: as written ("f32", or torch's name for dtypes Kiln lacks)
  std::optional<DType> dtype;   ///< Tensor: nullopt when Kiln has no such dtype
  Shape shape;                  ///< Tensor
  std::vector<FxVal> items;     ///< Items
  std::string describe() const;  ///< "f32[2,3]", "(f32[2], i64[2])", "None", ...
};

/// A placeholder or lifted constant: a graph input.
struct FxPlaceholder {
  enum class Kind : uint8_t { Param, Buffer, Input, Constant };
  std::string name;
  Kind kind = Kind::Input;
  std::string key;                   ///< state_dict key, "inputN", or "__constant__.<name>"
  int64_t index = -1;                ///< inputs: position among the forward arguments
  std::vector<std::string> aliases;  ///< tied state_dict keys
  TensorType type;
};

/// A buffer the forward updates.
struct FxMutation {
  std::string key, placeholder;
  bool inplace = false;  ///< false: kind "value"
  std::string node;
  std::string op;   ///< inplace only
  int64_t arg = -1;  ///< inplace only: index of the updated argument
};

/// One argument of an op schema (`ops[target].args[i]`).
struct FxSchemaArg {
  std::string name, type;
  bool kwarg_only = false;
  std::optional<FxArg> default_value;
};

struct FxSchema {
  std::string text;  ///< "aten::addmm(Tensor self, ...) -> Tensor"
  std::vector<FxSchemaArg> args;
};

struct FxNode {
  std::string name, target;
  std::vector<FxArg> args;
  std::vector<std::pair<std::string, FxArg>> kwargs;
  FxVal val;
  std::string scope, source;
};

struct FxDocument {
  bool train = false;        ///< "mode": "train"
  std::string weights_file;  ///< may be empty when absent
  /// "shapes_only": true: no weights_file; the parameters, buffers and
  /// constants have types but no values (models/export.py --shapes-only).
  bool shapes_only = false;
  std::vector<FxPlaceholder> placeholders;
  std::vector<FxPlaceholder> constants;
  std::map<std::string, std::string> aliases;  ///< alias key -> canonical key
  std::vector<FxMutation> mutations;
  std::vector<FxNode> nodes;
  std::vector<FxArg> outputs;
  std::map<std::string, FxSchema, std::less<>> ops;
};

/// Parse and validate the JSON text of a .fx.json file. Throws KilnException
/// with a one-line message (without the file name; the caller adds it).
FxDocument parseFxDocument(const std::string& text);

/// Text from the file, made safe for a one-line message: control characters
/// and quotes escaped, long text cut ("...").
std::string escaped(std::string_view text);
/// escaped() in single quotes: 'conv1.weight'.
std::string quote(std::string_view text);

}  // namespace kiln::fx
