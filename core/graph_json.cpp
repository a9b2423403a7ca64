#include "core/graph_json.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/op_table.h"
#include "core/text_ir.h"

namespace kiln {

using nlohmann::json;

namespace {

json floatToJson(double v) {
  if (std::isfinite(v)) return v;
  return formatDouble(v);  // "inf", "-inf", "nan"
}

double floatFromJson(const json& j, const std::string& where) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    std::string s = j.get<std::string>();
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
    if (s == "nan") return NAN;
  }
  fail(where + ": expected a number");
}

json attrToJson(const Attr& a) {
  switch (attrKind(a)) {
    case AttrKind::Int: return {{"int", std::get<int64_t>(a)}};
    case AttrKind::Float: return {{"float", floatToJson(std::get<double>(a))}};
    case AttrKind::Ints: return {{"ints", std::get<std::vector<int64_t>>(a)}};
    case AttrKind::Floats: {
      json arr = json::array();
      for (double v : std::get<std::vector<double>>(a)) arr.push_back(floatToJson(v));
      return {{"floats", arr}};
    }
    case AttrKind::String: return {{"string", std::get<std::string>(a)}};
    case AttrKind::DType: return {{"dtype", std::string(dtypeName(std::get<DType>(a)))}};
    case AttrKind::Graph: return {{"graph", attrToString(a)}};  // a region, as its text IR
  }
  return nullptr;
}

Attr attrFromJson(const json& j, const std::string& where) {
  if (!j.is_object() || j.size() != 1) fail(where + ": an attribute must be an object with one typed entry");
  // Not `*j.items().begin()`: that binds to a temporary proxy (ASan: use-after-scope).
  const auto it = j.begin();
  const std::string kind = it.key();
  const json& v = it.value();
  if (kind == "int" && v.is_number_integer()) return v.get<int64_t>();
  if (kind == "float") return floatFromJson(v, where);
  if (kind == "string" && v.is_string()) return v.get<std::string>();
  if (kind == "graph" && v.is_string()) {
    auto region = parseGraph(v.get<std::string>(), where);
    if (!region) fail(region.error().message);
    return GraphAttr{std::make_shared<const Graph>(std::move(*region))};
  }
  if (kind == "dtype" && v.is_string()) {
    auto dt = parseDType(v.get<std::string>());
    if (!dt) fail(where + ": unknown dtype '" + v.get<std::string>() + "'");
    return *dt;
  }
  if (kind == "ints" && v.is_array()) {
    std::vector<int64_t> out;
    for (const auto& x : v) {
      if (!x.is_number_integer()) fail(where + ": 'ints' must hold integers");
      out.push_back(x.get<int64_t>());
    }
    return out;
  }
  if (kind == "floats" && v.is_array()) {
    std::vector<double> out;
    for (const auto& x : v) out.push_back(floatFromJson(x, where));
    return out;
  }
  fail(where + ": bad attribute entry '" + kind + "'");
}

const json& field(const json& obj, const char* key, const std::string& where) {
  if (!obj.is_object() || !obj.contains(key)) fail(where + ": missing field '" + key + "'");
  return obj.at(key);
}

std::string stringField(const json& obj, const char* key, const std::string& where) {
  const json& v = field(obj, key, where);
  if (!v.is_string()) fail(where + ": field '" + key + "' must be a string");
  return v.get<std::string>();
}

int64_t intField(const json& obj, const char* key, const std::string& where) {
  const json& v = field(obj, key, where);
  if (!v.is_number_integer()) fail(where + ": field '" + key + "' must be an integer");
  return v.get<int64_t>();
}

TensorType typeField(const json& obj, const std::string& where) {
  auto t = parseTensorType(stringField(obj, "type", where));
  if (!t.ok()) fail(where + ": " + t.error().message);
  return *t;
}

}  // namespace

Result<TensorType> parseTensorType(const std::string& s) {
  size_t lb = s.find('[');
  if (lb == std::string::npos || s.empty() || s.back() != ']') return Error{"bad type '" + s + "'"};
  auto dt = parseDType(s.substr(0, lb));
  if (!dt) return Error{"unknown dtype in type '" + s + "'"};
  TensorType t{*dt, {}};
  std::string dims = s.substr(lb + 1, s.size() - lb - 2);
  size_t pos = 0;
  while (pos < dims.size()) {
    size_t comma = dims.find(',', pos);
    std::string d = dims.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(d.c_str(), &end, 10);
    if (d.empty() || errno || *end || v < 0) return Error{"bad dimension in type '" + s + "'"};
    if (t.shape.size() >= 64) return Error{"too many dimensions in type '" + s + "'"};
    t.shape.push_back(v);
    if (comma == std::string::npos) break;
    pos = comma + 1;
    if (pos == dims.size()) return Error{"bad type '" + s + "'"};
  }
  if (boundedNumel(t.shape) < 0) return Error{"type '" + s + "' has more than 2^40 elements"};
  return t;
}

json graphToJson(const Graph& g) {
  json j;
  j["format"] = "kiln-graph";
  j["version"] = 1;
  j["name"] = g.name;
  j["inputs"] = json::array();
  for (const Value* v : g.inputs())
    j["inputs"].push_back({{"id", v->id()}, {"name", v->name()}, {"role", roleName(v->role())}, {"type", v->type().str()}});
  j["nodes"] = json::array();
  for (const auto& n : g.nodes()) {
    json jn;
    jn["op"] = n->op();
    jn["inputs"] = json::array();
    for (const Value* v : n->inputs()) jn["inputs"].push_back(v->id());
    jn["outputs"] = json::array();
    for (const Value* v : n->outputs()) jn["outputs"].push_back({{"id", v->id()}, {"type", v->type().str()}});
    if (!n->attrs().empty()) {
      json attrs = json::object();
      for (const auto& [k, a] : n->attrs()) attrs[k] = attrToJson(a);
      jn["attrs"] = attrs;
    }
    if (!n->scope().empty()) jn["scope"] = n->scope();
    if (!n->provenance().empty()) jn["provenance"] = n->provenance();
    j["nodes"].push_back(jn);
  }
  j["outputs"] = json::array();
  for (const GraphOutput& o : g.outputs())
    j["outputs"].push_back({{"id", o.value->id()}, {"name", o.name}, {"role", outputRoleName(o.role)}});
  return j;
}

Result<Graph> graphFromJson(const json& j, const std::string& where) {
  return catchErrors([&]() -> Graph {
    if (!j.is_object() || !j.contains("format") || j["format"] != "kiln-graph")
      fail(where + ": not a Kiln graph (missing \"format\": \"kiln-graph\")");
    if (intField(j, "version", where) != 1) fail(where + ": unsupported graph version");
    Graph g;
    if (j.contains("name") && j["name"].is_string()) g.name = j["name"].get<std::string>();
    std::unordered_map<int64_t, Value*> ids;
    auto define = [&](int64_t id, Value* v, const std::string& at) {
      if (!ids.emplace(id, v).second) fail(at + ": value id " + std::to_string(id) + " defined twice");
    };
    const json& inputs = field(j, "inputs", where);
    if (!inputs.is_array()) fail(where + ": 'inputs' must be a list");
    for (size_t i = 0; i < inputs.size(); ++i) {
      std::string at = where + ": inputs[" + std::to_string(i) + "]";
      auto role = parseRole(stringField(inputs[i], "role", at));
      if (!role || *role == ValueRole::Intermediate) fail(at + ": unknown role");
      Value* v = g.addInput(stringField(inputs[i], "name", at), typeField(inputs[i], at), *role);
      define(intField(inputs[i], "id", at), v, at);
    }
    const json& nodes = field(j, "nodes", where);
    if (!nodes.is_array()) fail(where + ": 'nodes' must be a list");
    for (size_t i = 0; i < nodes.size(); ++i) {
      std::string at = where + ": nodes[" + std::to_string(i) + "]";
      const json& jn = nodes[i];
      std::string op = stringField(jn, "op", at);
      if (!OpTable::get().find(op)) fail(at + ": unknown op '" + op + "'");
      std::vector<Value*> ins;
      const json& jin = field(jn, "inputs", at);
      if (!jin.is_array()) fail(at + ": 'inputs' must be a list");
      for (const auto& id : jin) {
        if (!id.is_number_integer()) fail(at + ": input ids must be integers");
        auto it = ids.find(id.get<int64_t>());
        if (it == ids.end()) fail(at + ": input id " + id.dump() + " is not defined before this node");
        ins.push_back(it->second);
      }
      AttrMap attrs;
      if (jn.contains("attrs")) {
        if (!jn["attrs"].is_object()) fail(at + ": 'attrs' must be an object");
        for (const auto& [k, v] : jn["attrs"].items()) attrs[k] = attrFromJson(v, at + ".attrs." + k);
        try {
          parseStringRegions(op, attrs);
        } catch (const KilnException& e) {
          fail(at + ": " + e.what());
        }
      }
      const json& jout = field(jn, "outputs", at);
      if (!jout.is_array()) fail(at + ": 'outputs' must be a list");
      std::vector<TensorType> types;
      for (const auto& o : jout) types.push_back(typeField(o, at));
      std::string scope = jn.contains("scope") ? stringField(jn, "scope", at) : "";
      std::string prov = jn.contains("provenance") ? stringField(jn, "provenance", at) : "";
      Node* n = g.createWithTypes(op, std::move(ins), std::move(attrs), std::move(types), scope, prov);
      for (size_t k = 0; k < jout.size(); ++k) define(intField(jout[k], "id", at), n->output(k), at);
    }
    const json& outs = field(j, "outputs", where);
    if (!outs.is_array()) fail(where + ": 'outputs' must be a list");
    for (size_t i = 0; i < outs.size(); ++i) {
      std::string at = where + ": outputs[" + std::to_string(i) + "]";
      auto it = ids.find(intField(outs[i], "id", at));
      if (it == ids.end()) fail(at + ": unknown value id");
      auto role = parseOutputRole(stringField(outs[i], "role", at));
      if (!role) fail(at + ": unknown output role");
      g.addOutput(it->second, stringField(outs[i], "name", at), *role);
    }
    return g;
  });
}

std::string graphToJsonText(const Graph& g) { return graphToJson(g).dump(1) + "\n"; }

Result<Graph> graphFromJsonText(const std::string& text, const std::string& where) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Error{where + ": malformed JSON"};
  return graphFromJson(j, where);
}

}  // namespace kiln
