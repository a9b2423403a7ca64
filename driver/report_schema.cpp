#include "driver/report_schema.h"

#include <string>
#include <vector>

#include "driver/report.h"

namespace kiln::driver {
namespace {

enum class Kind { String, Integer, Number, Bool, Object, Array };

struct Field {
  const char* key;
  Kind kind;
  bool required = true;
  /// For an object: its fields; for an array: the fields of every entry
  /// (which must then be objects); empty: not looked into.
  std::vector<Field> fields = {};
};

constexpr bool kOptional = false;

const std::vector<Field>& schema() {
  using K = Kind;
  static const std::vector<Field> kSchema = {
      {"schema", K::String},
      {"version", K::Integer},
      {"command", K::String},
      {"model", K::Object, true, {{"path", K::String}, {"format", K::String}, {"params", K::Integer}}},
      {"options", K::Object, kOptional},  // reports of version 1 written before it was
      {"training", K::Object, true, {{"loss", K::String}, {"optimizer", K::String}, {"memory_budget", K::Number}}},
      {"passes",
       K::Array,
       true,
       {{"name", K::String},
        {"millis", K::Number},
        {"changed", K::Bool},
        {"nodes", K::Integer},
        {"flops", K::Number},
        {"peak_bytes", K::Number},
        {"statistics", K::Object},
        {"ir", K::String, kOptional},
        {"ir_before", K::String, kOptional}}},
      {"graph", K::Object, true, {{"nodes", K::Integer}, {"hash", K::String}, {"ir", K::String, kOptional}}},
      {"memory",
       K::Object,
       true,
       {{"peak_bytes", K::Number},
        {"rules", K::String, kOptional},  // reports before one memory model had none
        {"peak_node", K::Integer},
        {"timeline", K::Array},
        {"tensors",
         K::Array,
         true,
         {{"value", K::String},
          {"type", K::String},
          {"kind", K::String},
          {"producer", K::String},
          {"scope", K::String},
          {"first", K::Integer},
          {"last", K::Integer},
          {"bytes", K::Number},
          {"rematerialized", K::Bool}}}}},
      {"kernels",
       K::Array,
       true,
       {{"node", K::String},
        {"kernel", K::String},
        {"dialect", K::String},
        {"stage", K::Integer},
        {"measured_ms", K::Number, kOptional},
        {"autotune", K::Array, kOptional, {{"kernel", K::String}, {"millis", K::Number}}}}},
      {"execution", K::Object, true, {{"stages", K::Integer}, {"profiled_steps", K::Integer, kOptional}}},
      {"compile", K::Object, true, {{"millis", K::Number}}},
      {"steps",
       K::Array,
       kOptional,
       {{"step", K::Integer}, {"loss", K::Number}, {"lr", K::Number}, {"millis", K::Number}}},
      {"communication",
       K::Object,
       kOptional,
       {{"ranks", K::Integer},
        {"backend", K::String},
        {"steps",
         K::Array,
         true,
         {{"step_ms", K::Number},
          {"comm_ms", K::Number},
          {"exposed_ms", K::Number},
          {"collectives",
           K::Array,
           true,
           {{"bucket", K::Integer},
            {"collective", K::String},
            {"algorithm", K::String},
            {"tensors", K::Integer},
            {"dense_bytes", K::Number},
            {"sent_bytes", K::Number},
            {"begin_ms", K::Number},
            {"end_ms", K::Number},
            {"waited_ms", K::Number}}}}}}},
  };
  return kSchema;
}

const char* kindName(Kind k) {
  switch (k) {
    case Kind::String: return "a string";
    case Kind::Integer: return "an integer";
    case Kind::Number: return "a number";
    case Kind::Bool: return "a boolean";
    case Kind::Object: return "an object";
    case Kind::Array: return "an array";
  }
  return "?";
}

const char* typeName(const nlohmann::json& v) {
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_object()) return "an object";
  if (v.is_array()) return "an array";
  return "null";
}

bool isKind(const nlohmann::json& v, Kind k) {
  switch (k) {
    case Kind::String: return v.is_string();
    case Kind::Integer: return v.is_number_integer();
    case Kind::Number: return v.is_number();
    case Kind::Bool: return v.is_boolean();
    case Kind::Object: return v.is_object();
    case Kind::Array: return v.is_array();
  }
  return false;
}

/// The first mismatch of `object` against `fields`, "" when none.
std::string check(const nlohmann::json& object, const std::vector<Field>& fields, const std::string& path) {
  for (const Field& f : fields) {
    const std::string at = path.empty() ? f.key : path + "." + f.key;
    auto it = object.find(f.key);
    if (it == object.end()) {
      if (f.required) return at + ": missing";
      continue;
    }
    if (!isKind(*it, f.kind)) return at + ": expected " + kindName(f.kind) + ", got " + typeName(*it);
    if (f.fields.empty()) continue;
    if (f.kind == Kind::Object) {
      if (std::string e = check(*it, f.fields, at); !e.empty()) return e;
      continue;
    }
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string entry = at + "[" + std::to_string(i) + "]";
      if (!(*it)[i].is_object()) return entry + ": expected an object, got " + typeName((*it)[i]);
      if (std::string e = check((*it)[i], f.fields, entry); !e.empty()) return e;
    }
  }
  return "";
}

}  // namespace

Status checkReport(const nlohmann::json& report) {
  if (!report.is_object()) return Error{"not a report: expected a JSON object"};
  const auto version = report.find("version");
  const std::string v = version != report.end() && version->is_number_integer()
                            ? std::to_string(version->get<int64_t>())
                            : std::string("?");
  if (v != std::to_string(kReportVersion))
    return Error{"report version " + v + ": this Kiln reads version " + std::to_string(kReportVersion)};
  if (std::string e = check(report, schema(), ""); !e.empty()) return Error{"report version " + v + ": " + e};
  return {};
}

}  // namespace kiln::driver
