// Parsing and validating a .fx.json document into FxDocument. Every access
// goes through JsonAt, which knows its JSON path, so a wrong type anywhere
// reads "nodes[12].args[3]: expected an int list, got string".
#include "core/import/fx/fx_document.h"

#include <cmath>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "core/result.h"

namespace kiln::fx {
namespace {

using nlohmann::json;

/// A JSON value and its path from the document root, for messages.
class JsonAt {
 public:
  JsonAt(const json& j, std::string path) : j_(j), path_(std::move(path)) {}

  const json& raw() const { return j_; }
  const std::string& path() const { return path_; }
  [[noreturn]] void fail(const std::string& what) const { kiln::fail(path_ + ": " + what); }
  [[noreturn]] void wrongType(const char* expected) const {
    fail(std::string("expected ") + expected + ", got " + j_.type_name());
  }

  bool isNull() const { return j_.is_null(); }
  /// Required member of an object.
  JsonAt get(const char* key) const {
    const json& o = object();
    auto it = o.find(key);
    if (it == o.end()) fail(std::string("missing field '") + key + "'");
    return {*it, child(key)};
  }
  /// Optional member (absent or null: nullopt).
  std::optional<JsonAt> find(const char* key) const {
    const json& o = object();
    auto it = o.find(key);
    if (it == o.end() || it->is_null()) return std::nullopt;
    return JsonAt{*it, child(key)};
  }
  const json& object() const {
    if (!j_.is_object()) wrongType("an object");
    return j_;
  }
  size_t size() const {
    if (!j_.is_array()) wrongType("an array");
    return j_.size();
  }
  JsonAt operator[](size_t i) const { return {j_.at(i), path_ + "[" + std::to_string(i) + "]"}; }
  std::string str() const {
    if (!j_.is_string()) wrongType("a string");
    return j_.get<std::string>();
  }
  int64_t integer() const {
    if (j_.is_number_unsigned()) {
      if (j_.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail("integer out of range");
      return static_cast<int64_t>(j_.get<uint64_t>());
    }
    if (!j_.is_number_integer()) wrongType("an integer");
    return j_.get<int64_t>();
  }
  bool boolean() const {
    if (!j_.is_boolean()) wrongType("a boolean");
    return j_.get<bool>();
  }
  /// A member reached by iterating an object (keys may hold any bytes).
  JsonAt member(const std::string& key, const json& value) const { return {value, child(key)}; }
  std::string optStr(const char* key) const {
    auto f = find(key);
    return f ? f->str() : std::string();
  }

 private:
  std::string child(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  const json& j_;
  std::string path_;
};

/// Deepest bracket nesting outside strings (checked before parsing: the
/// parser's memory and our recursive decoders grow with it).
size_t maxNesting(std::string_view s) {
  size_t depth = 0, worst = 0;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      worst = std::max(worst, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return worst;
}

DType parseDTypeName(const JsonAt& at) {
  std::string s = at.str();
  auto t = parseDType(s);
  if (!t) at.fail("unsupported dtype " + quote(s) + " (Kiln has f32 f64 f16 bf16 i64 i32 i16 i8 u8 bool)");
  return *t;
}

/// A static shape: non-negative dims whose product stays below kMaxElements.
Shape parseShape(const JsonAt& at) {
  Shape shape;
  int64_t numel = 1;
  for (size_t i = 0; i < at.size(); ++i) {
    int64_t d = at[i].integer();
    if (d < 0) at[i].fail("negative dimension " + std::to_string(d));
    if (d > kMaxElements || (d > 0 && numel > kMaxElements / d))
      at.fail("shape has more than 2^40 elements");
    numel *= d;
    shape.push_back(d);
  }
  return shape;
}

FxArg parseArg(const JsonAt& at) {
  const json& j = at.raw();
  FxArg a;
  switch (j.type()) {
    case json::value_t::null: return a;
    case json::value_t::boolean:
      a.kind = FxArg::Kind::Bool;
      a.b = j.get<bool>();
      a.i = a.b;
      a.f = a.b;
      return a;
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      a.kind = FxArg::Kind::Int;
      a.i = at.integer();
      a.f = static_cast<double>(a.i);
      return a;
    case json::value_t::number_float:
      a.kind = FxArg::Kind::Float;
      a.f = j.get<double>();
      return a;
    case json::value_t::string:
      a.kind = FxArg::Kind::String;
      a.s = j.get<std::string>();
      return a;
    case json::value_t::array:
      a.kind = FxArg::Kind::List;
      for (size_t i = 0; i < j.size(); ++i) a.items.push_back(parseArg(at[i]));
      return a;
    case json::value_t::object: break;
    default: at.fail(std::string("cannot decode a ") + j.type_name() + " argument");
  }
  if (j.size() != 1) at.fail("an encoded argument object must have exactly one key");
  const std::string& key = j.begin().key();
  JsonAt v = at.member(key, j.begin().value());
  if (key == "node") {
    a.kind = FxArg::Kind::Node;
    a.s = v.str();
  } else if (key == "float") {
    std::string s = v.str();
    a.kind = FxArg::Kind::Float;
    if (s == "inf") a.f = std::numeric_limits<double>::infinity();
    else if (s == "-inf") a.f = -std::numeric_limits<double>::infinity();
    else if (s == "nan") a.f = std::numeric_limits<double>::quiet_NaN();
    else v.fail("expected \"inf\", \"-inf\" or \"nan\", got " + quote(s));
  } else if (key == "tuple") {
    a.kind = FxArg::Kind::Tuple;
    for (size_t i = 0; i < v.size(); ++i) a.items.push_back(parseArg(v[i]));
  } else if (key == "dtype") {
    a.kind = FxArg::Kind::DType;
    a.dtype = parseDTypeName(v);
  } else if (key == "device" || key == "memory_format" || key == "layout") {
    a.kind = key == "device" ? FxArg::Kind::Device : key == "layout" ? FxArg::Kind::Layout : FxArg::Kind::MemoryFormat;
    a.s = v.str();
  } else {
    at.fail("unknown encoded argument kind " + quote(key));
  }
  return a;
}

FxVal parseVal(const JsonAt& at) {
  FxVal v;
  if (at.isNull()) return v;
  if (auto items = at.find("items")) {
    v.kind = FxVal::Kind::Items;
    for (size_t i = 0; i < items->size(); ++i) v.items.push_back(parseVal((*items)[i]));
  } else if (auto dt = at.find("dtype")) {
    v.kind = FxVal::Kind::Tensor;
    v.dtype_name = dt->str();
    v.dtype = parseDType(v.dtype_name);
    v.shape = parseShape(at.get("shape"));
  } else if (at.find("scalar")) {
    v.kind = FxVal::Kind::Scalar;
    v.dtype_name = at.get("scalar").str();
  } else if (at.find("other")) {
    v.kind = FxVal::Kind::Other;
    v.dtype_name = at.get("other").str();
  } else {
    at.fail("expected a value description (dtype/shape, items, scalar or other)");
  }
  return v;
}

FxPlaceholder parsePlaceholder(const JsonAt& at, bool constant) {
  FxPlaceholder p;
  p.name = at.get("name").str();
  std::string kind = at.get("kind").str();
  if (constant) {
    if (kind != "constant") at.get("kind").fail("expected \"constant\", got " + quote(kind));
    p.kind = FxPlaceholder::Kind::Constant;
  } else if (kind == "param") {
    p.kind = FxPlaceholder::Kind::Param;
  } else if (kind == "buffer") {
    p.kind = FxPlaceholder::Kind::Buffer;
  } else if (kind == "input") {
    p.kind = FxPlaceholder::Kind::Input;
    p.index = at.get("index").integer();
  } else {
    at.get("kind").fail("expected \"param\", \"buffer\" or \"input\", got " + quote(kind));
  }
  p.key = at.get("key").str();
  if (p.key.empty()) at.get("key").fail("empty key");
  if (auto al = at.find("aliases"))
    for (size_t i = 0; i < al->size(); ++i) p.aliases.push_back((*al)[i].str());
  p.type.dtype = parseDTypeName(at.get("dtype"));
  p.type.shape = parseShape(at.get("shape"));
  return p;
}

FxMutation parseMutation(const JsonAt& at) {
  FxMutation m;
  m.key = at.get("key").str();
  m.placeholder = at.get("placeholder").str();
  std::string kind = at.get("kind").str();
  if (kind != "value" && kind != "inplace")
    at.get("kind").fail("expected \"value\" or \"inplace\", got " + quote(kind));
  m.inplace = kind == "inplace";
  m.node = at.get("node").str();
  if (m.inplace) {
    m.op = at.get("op").str();
    m.arg = at.get("arg").integer();
  }
  return m;
}

FxSchema parseSchema(const JsonAt& at) {
  FxSchema s;
  s.text = at.optStr("schema");
  JsonAt args = at.get("args");
  std::set<std::string> seen;
  for (size_t i = 0; i < args.size(); ++i) {
    JsonAt a = args[i];
    FxSchemaArg sa;
    sa.name = a.get("name").str();
    if (!seen.insert(sa.name).second) a.fail("argument name " + quote(sa.name) + " appears twice");
    sa.type = a.optStr("type");
    if (auto k = a.find("kwarg_only")) sa.kwarg_only = k->boolean();
    // A default of None is written as null, so "present" is what matters.
    const json& o = a.object();
    if (o.contains("default")) sa.default_value = parseArg(a.get("default"));
    s.args.push_back(std::move(sa));
  }
  return s;
}

FxNode parseNode(const JsonAt& at) {
  FxNode n;
  n.name = at.get("name").str();
  n.target = at.get("target").str();
  JsonAt args = at.get("args");
  for (size_t i = 0; i < args.size(); ++i) n.args.push_back(parseArg(args[i]));
  if (auto kw = at.find("kwargs"))
    for (const auto& [k, v] : kw->object().items()) n.kwargs.emplace_back(k, parseArg(kw->member(k, v)));
  n.val = parseVal(at.get("val"));
  n.scope = at.optStr("scope");
  n.source = at.optStr("source");
  return n;
}

}  // namespace

std::string escaped(std::string_view name) {
  constexpr size_t kMaxShown = 120;
  std::string out;
  size_t n = std::min(name.size(), kMaxShown);
  // Do not cut a UTF-8 sequence in half.
  while (n < name.size() && n > 0 && (static_cast<unsigned char>(name[n]) & 0xC0) == 0x80) --n;
  for (size_t i = 0; i < n; ++i) {
    auto c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\') {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return n < name.size() ? out + "..." : out;
}

std::string quote(std::string_view name) {
  std::string out = "'";  // built with += : "'" + s + "'" trips a GCC 12 -Wrestrict false positive
  out += escaped(name);
  out += '\'';
  return out;
}

std::string argKindName(FxArg::Kind k) {
  switch (k) {
    case FxArg::Kind::None: return "None";
    case FxArg::Kind::Bool: return "bool";
    case FxArg::Kind::Int: return "int";
    case FxArg::Kind::Float: return "float";
    case FxArg::Kind::String: return "string";
    case FxArg::Kind::Node: return "node reference";
    case FxArg::Kind::List: return "list";
    case FxArg::Kind::Tuple: return "tuple";
    case FxArg::Kind::DType: return "dtype";
    case FxArg::Kind::Device: return "device";
    case FxArg::Kind::MemoryFormat: return "memory_format";
    case FxArg::Kind::Layout: return "layout";
  }
  return "?";
}

std::string FxVal::describe() const {
  switch (kind) {
    case Kind::None: return "None";
    case Kind::Tensor: return dtype_name + shapeStr(shape);
    case Kind::Scalar: return "a Python " + dtype_name;
    case Kind::Other: return "a " + dtype_name;
    case Kind::Items: {
      std::string s = "(";
      for (size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + items[i].describe();
      return s + ")";
    }
  }
  return "?";
}

FxDocument parseFxDocument(const std::string& text) {
  if (maxNesting(text) > kMaxJsonDepth)
    fail("JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels; not an FX dump");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 3, ..." -> keep the part a user reads.
    std::string msg = e.what();
    if (auto p = msg.find("] "); p != std::string::npos) msg = msg.substr(p + 2);
    for (char& c : msg)
      if (static_cast<unsigned char>(c) < 0x20) c = ' ';
    fail("malformed JSON: " + msg);
  }
  JsonAt root(j, "");
  if (!j.is_object()) fail("expected a JSON object at the top level, got " + std::string(j.type_name()));

  FxDocument doc;
  std::string format = root.get("format").str();
  if (format != "kiln-fx") fail("not a Kiln FX dump: format is " + quote(format) + ", expected 'kiln-fx'");
  int64_t version = root.get("version").integer();
  if (version != 1)
    fail("FX dump format version " + std::to_string(version) + " is not supported (this Kiln reads version 1)");
  std::string mode = root.get("mode").str();
  if (mode != "train" && mode != "eval") root.get("mode").fail("expected \"train\" or \"eval\", got " + quote(mode));
  doc.train = mode == "train";
  doc.weights_file = root.optStr("weights_file");
  if (auto s = root.find("shapes_only")) doc.shapes_only = s->boolean();

  std::set<std::string> names;
  auto claim = [&](const JsonAt& at, const std::string& name) {
    if (name.empty()) at.fail("empty name");
    if (!names.insert(name).second) at.fail("name " + quote(name) + " is defined twice");
  };
  JsonAt phs = root.get("placeholders");
  for (size_t i = 0; i < phs.size(); ++i) {
    doc.placeholders.push_back(parsePlaceholder(phs[i], false));
    claim(phs[i], doc.placeholders.back().name);
  }
  if (auto cs = root.find("constants")) {
    for (size_t i = 0; i < cs->size(); ++i) {
      doc.constants.push_back(parsePlaceholder((*cs)[i], true));
      claim((*cs)[i], doc.constants.back().name);
    }
  }
  if (auto al = root.find("aliases"))
    for (const auto& [k, v] : al->object().items()) doc.aliases[k] = al->member(k, v).str();
  if (auto ms = root.find("mutations"))
    for (size_t i = 0; i < ms->size(); ++i) doc.mutations.push_back(parseMutation((*ms)[i]));
  JsonAt nodes = root.get("nodes");
  for (size_t i = 0; i < nodes.size(); ++i) {
    doc.nodes.push_back(parseNode(nodes[i]));
    claim(nodes[i], doc.nodes.back().name);
  }
  JsonAt outs = root.get("outputs");
  for (size_t i = 0; i < outs.size(); ++i) doc.outputs.push_back(parseArg(outs[i]));
  JsonAt ops = root.get("ops");
  for (const auto& [k, v] : ops.object().items()) doc.ops.emplace(k, parseSchema(ops.member(k, v)));
  return doc;
}

}  // namespace kiln::fx
