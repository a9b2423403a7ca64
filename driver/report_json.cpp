// The report's JSON form. Each report type lists its fields once, in
// Fields<T>::visit, as calls on a visitor: the Writer turns them into JSON
// keys in that order, the Reader finds, type-checks and reads them back.
// A field is required unless marked kSince (a key that reports of this
// version written before it existed lack: absent reads as its default);
// std::optional fields are left out when empty and may be absent.
#include "driver/report_json.h"

#include <cmath>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/file_io.h"

namespace kiln::driver {
namespace {

enum Presence { kRequired, kSince };

template <class T>
struct Fields;

template <class T>
struct IsVector : std::false_type {};
template <class T>
struct IsVector<std::vector<T>> : std::true_type {};
template <class T>
struct IsOptional : std::false_type {};
template <class T>
struct IsOptional<std::optional<T>> : std::true_type {};

using Statistics = std::vector<std::pair<std::string, double>>;

// ---------------------------------------------------------------------------
// Writing

class Writer {
 public:
  nlohmann::ordered_json out = nlohmann::ordered_json::object();

  template <class T>
  void field(const char* key, const T& v, Presence = kRequired) {
    if constexpr (IsOptional<T>::value) {
      if (v) out[key] = write(*v);
    } else {
      out[key] = write(v);
    }
  }
  /// A whole-number counter kept as a double (FLOP): written as an integer when whole.
  void count(const char* key, double v, Presence = kRequired) { out[key] = countJson(v); }
  /// Written as null when empty.
  template <class T>
  void nullable(const char* key, const std::optional<T>& v) {
    out[key] = v ? write(*v) : nlohmann::ordered_json();
  }
  /// Written only when not its default (an empty list, a zero).
  template <class T>
  void unlessDefault(const char* key, const T& v) {
    bool is_default;
    if constexpr (IsVector<T>::value)
      is_default = v.empty();
    else
      is_default = v == T{};
    if (!is_default) out[key] = write(v);
  }
  /// A value computed from other fields: written, checked for type on read.
  template <class T>
  void derived(const char* key, const T& v, Presence = kRequired) {
    out[key] = write(v);
  }

  template <class T>
  static nlohmann::ordered_json write(const T& v) {
    if constexpr (std::is_same_v<T, Statistics>) {
      nlohmann::ordered_json o = nlohmann::ordered_json::object();
      for (const auto& [k, x] : v) o[k] = countJson(x);
      return o;
    } else if constexpr (IsVector<T>::value) {
      nlohmann::ordered_json a = nlohmann::ordered_json::array();
      for (const auto& x : v) a.push_back(write(x));
      return a;
    } else if constexpr (std::is_same_v<T, std::string> || std::is_arithmetic_v<T> ||
                         std::is_same_v<T, nlohmann::ordered_json>) {
      return v;
    } else {
      Writer w;
      Fields<T>::visit(w, v);
      return std::move(w.out);
    }
  }
};

// ---------------------------------------------------------------------------
// Reading

const char* typeName(const nlohmann::json& v) {
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_object()) return "an object";
  if (v.is_array()) return "an array";
  return "null";
}

/// Reads the fields of one JSON object; the first problem is kept in
/// `error` ("memory.tensors[3].bytes: missing") and ends the reading.
class Reader {
 public:
  Reader(const nlohmann::json& in, std::string path, std::string& error)
      : in_(in), path_(std::move(path)), error_(error) {}

  template <class T>
  void field(const char* key, T& v, Presence p = kRequired) {
    if (const nlohmann::json* j = find(key, IsOptional<T>::value ? kSince : p)) read(*j, at(key), v);
  }
  void count(const char* key, double& v, Presence p = kRequired) { field(key, v, p); }
  template <class T>
  void nullable(const char* key, std::optional<T>& v) {
    const nlohmann::json* j = find(key, kSince);
    if (j && !j->is_null()) read(*j, at(key), v);
  }
  template <class T>
  void unlessDefault(const char* key, T& v) {
    field(key, v, kSince);
  }
  template <class T>
  void derived(const char* key, const T&, Presence p = kRequired) {
    T ignored{};
    field(key, ignored, p);
  }

 private:
  std::string at(const char* key) const { return path_.empty() ? key : path_ + "." + key; }

  const nlohmann::json* find(const char* key, Presence p) {
    if (!error_.empty()) return nullptr;
    auto it = in_.find(key);
    if (it != in_.end()) return &*it;
    if (p == kRequired) error_ = at(key) + ": missing";
    return nullptr;
  }

  bool expect(bool ok, const nlohmann::json& j, const std::string& path, const char* what) {
    if (!ok && error_.empty()) error_ = path + ": expected " + what + ", got " + typeName(j);
    return ok;
  }

  template <class T>
  void read(const nlohmann::json& j, const std::string& path, T& v) {
    if (!error_.empty()) return;
    if constexpr (IsOptional<T>::value) {
      typename T::value_type x{};
      read(j, path, x);
      v = std::move(x);
    } else if constexpr (std::is_same_v<T, Statistics>) {
      if (!expect(j.is_object(), j, path, "an object")) return;
      v.clear();
      for (auto it = j.begin(); it != j.end(); ++it) {
        double x = 0;
        read(*it, path + "." + it.key(), x);
        v.emplace_back(it.key(), x);
      }
    } else if constexpr (IsVector<T>::value) {
      if (!expect(j.is_array(), j, path, "an array")) return;
      v.assign(j.size(), typename T::value_type{});
      for (size_t i = 0; i < j.size(); ++i) read(j[i], path + "[" + std::to_string(i) + "]", v[i]);
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (expect(j.is_string(), j, path, "a string")) v = j.get<std::string>();
    } else if constexpr (std::is_same_v<T, bool>) {
      if (expect(j.is_boolean(), j, path, "a boolean")) v = j.get<bool>();
    } else if constexpr (std::is_floating_point_v<T>) {
      if (expect(j.is_number(), j, path, "a number")) v = j.get<T>();
    } else if constexpr (std::is_unsigned_v<T>) {
      const bool ok = j.is_number_unsigned() || (j.is_number_integer() && j.get<int64_t>() >= 0);
      if (expect(ok, j, path, "a non-negative integer")) v = j.get<T>();
    } else if constexpr (std::is_integral_v<T>) {
      if (expect(j.is_number_integer(), j, path, "an integer")) v = j.get<T>();
    } else if constexpr (std::is_same_v<T, nlohmann::ordered_json>) {
      if (expect(j.is_object(), j, path, "an object")) v = nlohmann::ordered_json(j);
    } else {
      if (!expect(j.is_object(), j, path, "an object")) return;
      Reader r(j, path, error_);
      Fields<T>::visit(r, v);
    }
  }

  const nlohmann::json& in_;
  std::string path_;
  std::string& error_;
};

// ---------------------------------------------------------------------------
// The field lists: the report's keys, in the order they are written
// (docs/report-schema.md documents each).

template <>
struct Fields<ReportModel> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("path", m.path);
    f.field("format", m.format);
    f.field("param_tensors", m.param_tensors, kSince);
    f.field("params", m.params);
    f.field("param_bytes", m.param_bytes, kSince);
    f.field("trainable_params", m.trainable_params, kSince);
  }
};

template <>
struct Fields<ReportBatchInput> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("name", m.name);
    f.field("type", m.type);
  }
};

template <>
struct Fields<ReportCrossEntropy> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("label_smoothing", m.label_smoothing);
    f.field("ignore_index", m.ignore_index);
    f.field("class_weights", m.class_weights);
  }
};

template <>
struct Fields<ReportTraining> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("loss", m.loss);
    f.field("optimizer", m.optimizer);
    f.field("lr", m.lr, kSince);
    f.field("lr_schedule", m.lr_schedule, kSince);
    f.field("warmup_steps", m.warmup_steps, kSince);
    f.field("weight_decay", m.weight_decay, kSince);
    f.field("clip_grad_norm", m.clip_grad_norm, kSince);
    f.field("memory_budget", m.memory_budget);
    f.field("cross_entropy", m.cross_entropy, kSince);
    f.field("freeze", m.freeze, kSince);
    f.field("frozen", m.frozen, kSince);
    f.field("batch", m.batch, kSince);
    f.field("batch_source", m.batch_source, kSince);
  }
};

template <>
struct Fields<ReportPass> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("name", m.name);
    f.field("millis", m.millis);
    f.field("changed", m.changed);
    f.field("nodes", m.nodes);
    f.count("flops", m.flops);
    f.field("peak_bytes", m.peak_bytes);
    f.field("hash", m.hash, kSince);
    f.field("statistics", m.statistics);
    f.field("ir_before", m.ir_before);
    f.field("ir", m.ir);
  }
};

template <>
struct Fields<ReportGraph> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("nodes", m.nodes);
    f.count("flops", m.flops, kSince);
    f.field("peak_bytes", m.peak_bytes, kSince);
    f.field("hash", m.hash);
    f.field("ir", m.ir);
  }
};

template <>
struct Fields<ReportTensor> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("value", m.value);
    f.field("type", m.type);
    f.field("bytes", m.bytes);
    f.field("kind", m.kind);
    f.field("producer", m.producer);
    f.field("scope", m.scope);
    f.field("first", m.first);
    f.field("last", m.last);
    f.nullable("offset", m.offset);
    f.field("views", m.views, kSince);
    f.field("rematerialized", m.rematerialized);
    f.field("category", m.category, kSince);
  }
};

template <>
struct Fields<ReportCategory> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("name", m.name);
    f.field("bytes", m.bytes);
  }
};

template <>
struct Fields<ReportMemory> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("schedule", m.schedule, kSince);
    f.field("rules", m.rules, kSince);
    f.field("widened_to_stages", m.widened_to_stages, kSince);
    f.field("peak_bytes", m.peak_bytes);
    f.field("peak_node", m.peak_node);
    f.field("peak_at", m.peak_at, kSince);
    f.field("op_by_op_peak_bytes", m.op_by_op_peak_bytes, kSince);
    f.field("input_bytes", m.input_bytes, kSince);
    f.field("returned_bytes", m.returned_bytes, kSince);
    f.field("arena_bytes", m.arena_bytes, kSince);
    f.field("arena_lower_bound", m.arena_lower_bound, kSince);
    f.field("unshared_bytes", m.unshared_bytes, kSince);
    f.field("timeline", m.timeline);
    f.field("tensors", m.tensors);
    f.field("categories", m.categories, kSince);
  }
};

template <>
struct Fields<ReportTiming> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("kernel", m.kernel);
    f.field("millis", m.millis);
    f.field("error", m.error);
  }
};

template <>
struct Fields<ReportKernel> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("node", m.node);
    f.field("kernel", m.kernel);
    f.field("dialect", m.dialect);
    f.field("stage", m.stage);
    f.field("op", m.op, kSince);
    f.field("scope", m.scope, kSince);
    f.field("flops", m.flops, kSince);
    f.field("bytes", m.bytes, kSince);
    f.field("dtype", m.dtype, kSince);
    f.unlessDefault("autotune", m.autotune);
    f.field("measured_ms", m.measured_ms);
  }
};

template <>
struct Fields<ReportKernelSelection> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("dialects", m.dialects);
    f.field("autotune", m.autotune);
  }
};

template <>
struct Fields<ReportExecution> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("threads", m.threads, kSince);
    f.field("concurrent_nodes", m.concurrent_nodes, kSince);
    f.field("stages", m.stages);
    f.field("shared_stages", m.shared_stages, kSince);
    f.field("nodes_in_shared_stages", m.nodes_in_shared_stages, kSince);
    f.field("widest_stage", m.widest_stage, kSince);
    f.field("profiled_steps", m.profiled_steps);
  }
};

template <>
struct Fields<ReportCache> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("status", m.status);
    f.field("dir", m.dir);
    f.field("key", m.key);
    f.field("entry", m.entry);
    f.field("load_millis", m.load_millis);
    f.field("problem", m.problem);
  }
};

template <>
struct Fields<ReportCompile> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("millis", m.millis);
    f.field("import_millis", m.import_millis, kSince);
    f.field("imports", m.imports, kSince);
    f.field("passes_millis", m.passes_millis, kSince);
    f.field("build_millis", m.build_millis, kSince);
    f.field("peak_rss_bytes", m.peak_rss_bytes, kSince);
  }
};

template <>
struct Fields<StepRecord> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("step", m.step);
    f.field("loss", m.loss);
    f.field("lr", m.lr);
    f.field("millis", m.millis);
  }
};

template <>
struct Fields<CollectiveRecord> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("bucket", m.bucket);
    f.field("collective", m.collective);
    f.field("algorithm", m.algorithm);
    f.field("node", m.node, kSince);
    f.field("tensors", m.tensors);
    f.field("dense_bytes", m.dense_bytes);
    f.field("sent_bytes", m.sent_bytes);
    f.field("start_ms", m.start_ms, kSince);
    f.field("begin_ms", m.begin_ms);
    f.field("end_ms", m.end_ms);
    f.field("waited_ms", m.waited_ms);
    f.unlessDefault("blocks", m.blocks);  // sparse allreduces only
    if (m.blocks) f.field("nonzero_blocks", m.nonzero_blocks);
  }
};

template <>
struct Fields<CommStep> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("step", m.step, kSince);
    f.field("step_ms", m.step_ms);
    f.derived("comm_ms", m.commMillis());
    f.derived("exposed_ms", m.exposedMillis());
    f.derived("overlap", m.overlap(), kSince);
    f.derived("dense_bytes", m.denseBytes(), kSince);
    f.derived("sent_bytes", m.sentBytes(), kSince);
    f.field("collectives", m.collectives);
  }
};

template <>
struct Fields<ReportCommunication> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("ranks", m.ranks);
    f.field("backend", m.backend);
    f.field("steps", m.steps);
  }
};

template <>
struct Fields<TimelineRow> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("name", m.name);
    f.field("kind", m.kind);
    f.unlessDefault("thread", m.thread);
  }
};

template <>
struct Fields<TimelineSlice> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("row", m.row);
    f.field("category", m.category);
    f.field("name", m.name);
    f.field("start_ms", m.start_ms);
    f.field("dur_ms", m.dur_ms);
    f.field("node", m.node);
    f.unlessDefault("threads", m.threads);
    f.unlessDefault("detail", m.detail);
  }
};

template <>
struct Fields<TimelineStep> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("step", m.step);
    f.field("start_ms", m.start_ms);
    f.field("end_ms", m.end_ms);
  }
};

template <>
struct Fields<ReportTimeline> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("rows", m.rows);
    f.field("steps", m.steps);
    f.field("slices", m.slices);
  }
};

template <>
struct Fields<ReportMachine> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("cpu", m.cpu);
    f.field("threads", m.threads);
    f.field("fp32_gemm_flops", m.fp32_gemm_flops);
    f.field("bf16_gemm_flops", m.bf16_gemm_flops);
    f.field("bandwidth_bytes", m.bandwidth_bytes);
    f.field("gemm_size", m.gemm_size);
    f.field("measured_at", m.measured_at);
  }
};

template <>
struct Fields<ReportSchedulePoint> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("step", m.step);
    f.field("change", m.change);
    f.field("compile_ms", m.compile_ms);
    f.field("cache", m.cache);
    f.field("nodes", m.nodes);
    f.field("trainable_params", m.trainable_params);
  }
};

template <>
struct Fields<ReportEvaluation> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("step", m.step);
    f.field("train_seconds", m.train_seconds);
    f.field("eval_ms", m.eval_ms);
    f.field("loss", m.loss);
    f.field("accuracy", m.accuracy);
    f.field("perplexity", m.perplexity);
  }
};

template <>
struct Fields<ReportTarget> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("metric", m.metric);
    f.field("value", m.value);
    f.field("reached", m.reached);
    f.field("step", m.step);
    f.field("train_seconds", m.train_seconds);
  }
};

template <>
struct Fields<ReportRecipe> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("schedule", m.schedule);
    f.field("evaluations", m.evaluations);
    f.field("target", m.target);
  }
};

template <>
struct Fields<Report> {
  template <class F, class M>
  static void visit(F& f, M& m) {
    f.field("schema", m.schema);
    f.field("version", m.version);
    f.field("kiln_version", m.kiln_version, kSince);
    f.field("command", m.command);
    f.field("model", m.model);
    f.field("options", m.options, kSince);
    f.field("training", m.training);
    f.field("passes", m.passes);
    f.field("graph", m.graph);
    f.field("memory", m.memory);
    f.field("kernels", m.kernels);
    f.field("kernel_selection", m.kernel_selection, kSince);
    f.field("device", m.device, kSince);
    f.field("execution", m.execution);
    f.field("cache", m.cache, kSince);
    f.field("compile", m.compile);
    f.field("steps", m.steps);
    f.field("communication", m.communication);
    f.field("timeline", m.timeline);
    f.field("machine", m.machine);
    f.field("recipe", m.recipe);
  }
};

}  // namespace

nlohmann::ordered_json countJson(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9.0e15) return static_cast<int64_t>(v);
  return v;
}

nlohmann::ordered_json toJson(const Report& report) {
  return Writer::write(report);
}

nlohmann::ordered_json toJson(const ReportMemory& memory) {
  return Writer::write(memory);
}

Result<Report> readReport(const std::string& path) {
  auto text = readFile(path);
  if (!text) return text.error();
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(*text);
  } catch (const nlohmann::json::parse_error& e) {
    return Error{path + ": not JSON (" + std::string(e.what()) + ")"};
  }
  auto report = reportFromJson(json);
  if (!report) return report.error().prefixed(path + ": ");
  return report;
}

nlohmann::ordered_json toJson(const ReportMachine& machine) {
  return Writer::write(machine);
}

Result<ReportMachine> machineFromJson(const nlohmann::json& json) {
  if (!json.is_object()) return Error{std::string("expected an object, got ") + typeName(json)};
  ReportMachine m;
  std::string error;
  Reader reader(json, "", error);
  Fields<ReportMachine>::visit(reader, m);
  if (!error.empty()) return Error{error};
  return m;
}

Result<Report> reportFromJson(const nlohmann::json& json) {
  const auto schema = json.is_object() ? json.find("schema") : json.end();
  if (!json.is_object() || schema == json.end() || *schema != "kiln-report")
    return Error{"not a kiln report (no \"schema\": \"kiln-report\"; write one with kiln compile --report)"};
  const auto version = json.find("version");
  const std::string v = version != json.end() && version->is_number_integer()
                            ? std::to_string(version->get<int64_t>())
                            : std::string("?");
  if (v != std::to_string(kReportVersion))
    return Error{"report version " + v + ": this Kiln reads version " + std::to_string(kReportVersion)};
  Report report;
  std::string error;
  Reader reader(json, "", error);
  Fields<Report>::visit(reader, report);
  if (!error.empty()) return Error{"report version " + v + ": " + error};
  return report;
}

}  // namespace kiln::driver
