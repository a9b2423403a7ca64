// The compile report (docs/report-schema.md): what was compiled, with which
// training options, what every pass did, which kernel runs each node, and
// what compiling cost.
#include "driver/report.h"

#include "core/text_ir.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "core/file_io.h"
#include "core/graph_cost.h"
#include "core/graph_hash.h"
#include "driver/memory_report.h"
#include "driver/messages.h"
#include "driver/option_table.h"
#include "driver/report_schema.h"

namespace kiln::driver {
namespace {

/// Counters are doubles; whole ones go out as JSON integers.
nlohmann::ordered_json number(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9.0e15) return static_cast<int64_t>(v);
  return v;
}

std::string modelFormat(const std::string& path) {
  auto ends = [&](const char* s) {
    std::string_view p(path), e(s);
    return p.size() >= e.size() && p.substr(p.size() - e.size()) == e;
  };
  return ends(".json") ? "fx" : "torchscript";
}

std::string fixed(double v, int decimals) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(decimals) << v;
  return s.str();
}

}  // namespace

uint64_t peakRssBytes() {
  struct rusage ru {};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;  // Linux reports kilobytes
}

Status checkReportPath(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Error{"--report " + path + ": no such directory " + dir.string()};
  if (fs::is_directory(p, ec)) return Error{"--report " + path + ": is a directory"};
  if (::access(dir.c_str(), W_OK) != 0)
    return Error{"--report " + path + ": directory " + dir.string() + " is not writable"};
  return {};
}

nlohmann::ordered_json buildReport(const std::string& command, const CompileOptions& a, const BoundStep& setup,
                                   double compile_ms) {
  const TrainingSession& s = *setup.session;
  const TrainingOptions& to = s.config().passes.training;
  nlohmann::ordered_json j;
  j["schema"] = "kiln-report";
  j["version"] = kReportVersion;
  j["kiln_version"] = KILN_VERSION;
  j["command"] = command;

  // The model's parameters are the step graph's Param inputs (tied ones once).
  int64_t params = 0, param_bytes = 0, trainable = 0, tensors = 0;
  for (const Value* v : s.graph().inputs())
    if (v->role() == ValueRole::Param) {
      ++tensors;
      params += v->type().numel();
      param_bytes += static_cast<int64_t>(v->type().bytes());
      if (!to.frozen.count(v->name())) trainable += v->type().numel();
    }
  j["model"] = {{"path", a.model.path}, {"format", modelFormat(a.model.path)}, {"param_tensors", tensors},
                {"params", params},     {"param_bytes", param_bytes},          {"trainable_params", trainable}};

  j["options"] = optionsJson(a);

  const OptimizerOptions& o = to.optimizer;
  nlohmann::ordered_json batch = nlohmann::ordered_json::array();
  for (const Value* v : s.batchInputs()) batch.push_back({{"name", v->name()}, {"type", v->type().str()}});
  j["training"] = {{"loss", std::string(lossKindName(to.loss))},
                   {"optimizer", std::string(optimizerKindName(o.kind))},
                   {"lr", s.config().lr},
                   {"lr_schedule", a.lr_schedule},
                   {"weight_decay", o.weightDecay()},
                   {"clip_grad_norm", o.clip_grad_norm},
                   {"memory_budget", to.memory_budget},
                   {"cross_entropy", {{"label_smoothing", to.cross_entropy.label_smoothing},
                                      {"ignore_index", to.cross_entropy.ignore_index},
                                      {"class_weights", to.cross_entropy.class_weights}}},
                   {"freeze", a.freeze},
                   {"frozen", std::vector<std::string>(to.frozen.begin(), to.frozen.end())},
                   {"batch", batch},
                   {"batch_source", setup.batches ? setup.batches->describe() : std::string()}};

  nlohmann::ordered_json passes = nlohmann::ordered_json::array();
  double pass_ms = 0;
  for (const PassTraceEntry& p : s.passTrace()) {
    nlohmann::ordered_json stats = nlohmann::ordered_json::object();
    for (const auto& [k, v] : p.result.statistics) stats[k] = number(v);
    nlohmann::ordered_json entry = {{"name", p.pass},
                                    {"millis", p.millis},
                                    {"changed", p.result.changed},
                                    {"nodes", p.nodes_after},
                                    {"flops", number(p.flops_after)},
                                    {"peak_bytes", p.peak_bytes_after},
                                    {"hash", hashHex(p.hash_after)},
                                    {"statistics", stats}};
    // --report-pass-ir: the graph the pipeline started from, and the graph
    // after every pass that changed it (an unchanged pass's is the last one).
    if (p.ir_before && passes.empty()) entry["ir_before"] = *p.ir_before;
    if (p.ir_after && p.result.changed) entry["ir"] = *p.ir_after;
    passes.push_back(std::move(entry));
    pass_ms += p.millis;
  }
  j["passes"] = passes;
  const Graph& g = s.graph();
  j["graph"] = {{"nodes", g.numNodes()},
                {"flops", number(graphFlops(g))},
                // the plan the executor runs (memory.peak_bytes): one peak per report
                {"peak_bytes", s.memoryPlan().peak_bytes},
                {"hash", hashHex(structuralHash(g))},
                {"ir", printGraph(g)}};  // kiln-studio draws the graph from it

  j["memory"] = memoryJson(s.memoryPlan());  // the plan the executor runs

  const NodeStages& stages = s.executor().stages();
  std::vector<size_t> stage_of(s.kernelChoices().size());
  size_t shared = 0, beside = 0, widest = 0;
  for (size_t k = 0; k < stages.size(); ++k) {
    const auto [first, end] = stages[k];
    for (size_t i = first; i < end && i < stage_of.size(); ++i) stage_of[i] = k;
    widest = std::max(widest, end - first);
    if (end - first > 1) ++shared, beside += end - first;
  }
  nlohmann::ordered_json kernels = nlohmann::ordered_json::array();
  for (size_t i = 0; i < s.kernelChoices().size(); ++i) {
    const KernelChoice& k = s.kernelChoices()[i];
    nlohmann::ordered_json e = {{"node", k.node}, {"kernel", k.kernel}, {"dialect", k.dialect}, {"stage", stage_of[i]}};
    if (!k.timings.empty()) {
      nlohmann::ordered_json t = nlohmann::ordered_json::array();
      for (const KernelTiming& c : k.timings) {
        nlohmann::ordered_json one = {{"kernel", c.kernel}, {"millis", c.millis}};
        if (!c.error.empty()) one["error"] = c.error;
        t.push_back(one);
      }
      e["autotune"] = t;
    }
    kernels.push_back(e);
  }
  j["kernels"] = kernels;
  j["kernel_selection"] = {{"dialects", s.config().kernels.dialects.str()}, {"autotune", s.config().kernels.autotune}};
  j["device"] = s.executor().deviceName();
  j["execution"] = {{"threads", s.executor().threads()},
                    {"concurrent_nodes", s.config().concurrent_nodes},
                    {"stages", stages.size()},
                    {"shared_stages", shared},
                    {"nodes_in_shared_stages", beside},
                    {"widest_stage", widest}};
  const CacheUse& c = setup.cache;
  j["cache"] = {{"status", c.status},       {"dir", c.dir},        {"key", c.key}, {"entry", c.entry},
                {"load_millis", c.load_ms}, {"problem", c.problem}};
  j["compile"] = {{"millis", compile_ms},
                  {"import_millis", setup.import_ms},
                  {"imports", setup.imports},
                  {"passes_millis", c.status == "hit" ? 0.0 : pass_ms},
                  {"build_millis", setup.compile_ms},
                  {"peak_rss_bytes", peakRssBytes()}};
  return j;
}

void addSteps(nlohmann::ordered_json& report, const std::vector<StepRecord>& steps) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const StepRecord& r : steps)
    out.push_back({{"step", r.step}, {"loss", r.loss}, {"lr", r.lr}, {"millis", r.millis}});
  report["steps"] = out;
}

void addNodeTimes(nlohmann::ordered_json& report, const std::vector<double>& node_ms, int64_t steps) {
  if (steps <= 0 || !report.contains("kernels") || report["kernels"].size() != node_ms.size()) return;
  nlohmann::ordered_json& kernels = report["kernels"];
  for (size_t i = 0; i < node_ms.size(); ++i) kernels[i]["measured_ms"] = node_ms[i] / double(steps);
  report["execution"]["profiled_steps"] = steps;
}

Status writeReport(const std::string& path, const nlohmann::ordered_json& report) {
  // The writer keeps the schema kiln-studio reads with (report_schema.h):
  // a report that breaks it is a Kiln bug, and no file is written.
  if (Status st = checkReport(nlohmann::json(report)); !st)
    return Error{"internal error: the report breaks its own schema (" + st.error().message + "); " + path +
                 " was not written"};
  return writeFileAtomic(path, report.dump(2) + "\n");
}

void printPassTable(std::ostream& out, const std::vector<PassTraceEntry>& trace) {
  out << std::left << std::setw(12) << "pass" << std::right << std::setw(9) << "ms" << std::setw(9) << "changed"
      << std::setw(8) << "nodes" << std::setw(15) << "flops" << std::setw(12) << "est. peak"
      << "  statistics\n";
  for (const PassTraceEntry& p : trace) {
    out << std::left << std::setw(12) << p.pass << std::right << std::setw(9) << fixed(p.millis, 2) << std::setw(9)
        << (p.result.changed ? "yes" : "no") << std::setw(8) << p.nodes_after << std::setw(15)
        << humanCount(p.flops_after, "FLOP") << std::setw(12)
        << humanCount(static_cast<double>(p.peak_bytes_after), "B") << " ";
    for (const auto& [k, v] : p.result.statistics) {
      out << " " << k << "=";
      if (k.find("flops") != std::string::npos)
        out << humanCount(v, "FLOP");
      else if (nlohmann::ordered_json n = number(v); n.is_number_integer())
        out << n.get<int64_t>();
      else
        out << v;
    }
    out << "\n";
  }
}

}  // namespace kiln::driver
