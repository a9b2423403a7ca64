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
#include <optional>
#include <ostream>
#include <sstream>

#include "core/file_io.h"
#include "core/graph_cost.h"
#include "core/graph_hash.h"
#include "core/op_table.h"
#include "driver/memory_report.h"
#include "driver/messages.h"
#include "driver/option_table.h"
#include "driver/report_json.h"

namespace kiln::driver {
namespace {

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

namespace {

/// The precision a node computes in (ReportKernel::dtype).
std::string computeDtype(const Node& n) {
  std::optional<DType> widest;
  for (const Value* v : n.inputs()) {
    const DType t = v->type().dtype;
    if (t == DType::BF16 || t == DType::F16) return std::string(dtypeName(t));
    if (isFloating(t) && (!widest || dtypeSize(t) > dtypeSize(*widest))) widest = t;
  }
  return widest ? std::string(dtypeName(*widest)) : std::string();
}

}  // namespace

Report buildReport(const std::string& command, const CompileOptions& a, const BoundStep& setup, double compile_ms) {
  const TrainingSession& s = *setup.session;
  const TrainingOptions& to = s.config().passes.training;
  Report r;
  r.kiln_version = KILN_VERSION;
  r.command = command;

  // The model's parameters are the step graph's Param inputs (tied ones once).
  ReportModel& m = r.model;
  m.path = a.model.path;
  m.format = modelFormat(a.model.path);
  for (const Value* v : s.graph().inputs())
    if (v->role() == ValueRole::Param) {
      ++m.param_tensors;
      m.params += v->type().numel();
      m.param_bytes += static_cast<int64_t>(v->type().bytes());
      if (!to.frozen.count(v->name())) m.trainable_params += v->type().numel();
    }

  r.options = optionsJson(a);

  const OptimizerOptions& o = to.optimizer;
  ReportTraining& t = r.training;
  t.loss = lossKindName(to.loss);
  t.optimizer = optimizerKindName(o.kind);
  t.lr = s.config().lr;
  t.lr_schedule = a.lr_schedule;
  t.warmup_steps = a.warmup_steps;
  t.weight_decay = o.weightDecay();
  t.clip_grad_norm = o.clip_grad_norm;
  t.memory_budget = to.memory_budget;
  t.cross_entropy = {to.cross_entropy.label_smoothing, to.cross_entropy.ignore_index, to.cross_entropy.class_weights};
  t.freeze = a.freeze;
  t.frozen.assign(to.frozen.begin(), to.frozen.end());
  for (const Value* v : s.batchInputs()) t.batch.push_back({v->name(), v->type().str()});
  t.batch_source = setup.batches ? setup.batches->describe() : std::string();

  double pass_ms = 0;
  for (const PassTraceEntry& p : s.passTrace()) {
    ReportPass e{p.pass, p.millis, p.result.changed, static_cast<int64_t>(p.nodes_after), p.flops_after,
                 p.peak_bytes_after, hashHex(p.hash_after)};
    e.statistics.assign(p.result.statistics.begin(), p.result.statistics.end());
    // --report-pass-ir: the graph the pipeline started from, and the graph
    // after every pass that changed it (an unchanged pass's is the last one).
    if (p.ir_before && r.passes.empty()) e.ir_before = *p.ir_before;
    if (p.ir_after && p.result.changed) e.ir = *p.ir_after;
    r.passes.push_back(std::move(e));
    pass_ms += p.millis;
  }
  const Graph& g = s.graph();
  // peak_bytes: the plan the executor runs (memory.peak_bytes), one peak per
  // report; ir: kiln-studio draws the graph from it.
  r.graph = {static_cast<int64_t>(g.numNodes()), graphFlops(g), s.memoryPlan().peak_bytes,
             hashHex(structuralHash(g)), printGraph(g)};

  r.memory = memoryReport(s.memoryPlan(), &g);  // the plan the executor runs

  const NodeStages& stages = s.executor().stages();
  std::vector<size_t> stage_of(s.kernelChoices().size());
  ReportExecution& x = r.execution;
  for (size_t k = 0; k < stages.size(); ++k) {
    const auto [first, end] = stages[k];
    for (size_t i = first; i < end && i < stage_of.size(); ++i) stage_of[i] = k;
    x.widest_stage = std::max<int64_t>(x.widest_stage, static_cast<int64_t>(end - first));
    if (end - first > 1) ++x.shared_stages, x.nodes_in_shared_stages += static_cast<int64_t>(end - first);
  }
  // The executors bind the graph's nodes in order, one kernel each.
  std::vector<const Node*> nodes;
  for (const auto& n : g.nodes()) nodes.push_back(n.get());
  const bool by_node = nodes.size() == s.kernelChoices().size();
  for (size_t i = 0; i < s.kernelChoices().size(); ++i) {
    const KernelChoice& k = s.kernelChoices()[i];
    ReportKernel e{k.node, k.kernel, k.dialect, static_cast<int64_t>(stage_of[i])};
    if (by_node && nodes[i]->describe() == k.node) {
      const Node& n = *nodes[i];
      const Cost cost = nodeCost(n);
      e.op = n.op();
      e.scope = n.scope();
      e.flops = cost.flops;
      e.bytes = cost.bytes;
      e.dtype = computeDtype(n);
    }
    for (const KernelTiming& c : k.timings)
      e.autotune.push_back({c.kernel, c.millis, c.error.empty() ? std::nullopt : std::optional(c.error)});
    r.kernels.push_back(std::move(e));
  }
  r.kernel_selection = {s.config().kernels.dialects.str(), s.config().kernels.autotune};
  r.device = s.executor().deviceName();
  x.threads = s.executor().threads();
  x.concurrent_nodes = s.config().concurrent_nodes;
  x.stages = static_cast<int64_t>(stages.size());
  const CacheUse& c = setup.cache;
  r.cache = {c.status, c.dir, c.key, c.entry, c.load_ms, c.problem};
  r.compile = {compile_ms,        setup.import_ms,   setup.imports, c.status == "hit" ? 0.0 : pass_ms,
               setup.compile_ms, peakRssBytes()};
  return r;
}

void addSteps(Report& report, const std::vector<StepRecord>& steps) {
  report.steps = steps;
}

void addNodeTimes(Report& report, const std::vector<double>& node_ms, int64_t steps) {
  if (steps <= 0 || report.kernels.size() != node_ms.size()) return;
  for (size_t i = 0; i < node_ms.size(); ++i) report.kernels[i].measured_ms = node_ms[i] / double(steps);
  report.execution.profiled_steps = steps;
}

Status writeReport(const std::string& path, const Report& report) {
  return writeFileAtomic(path, toJson(report).dump(2) + "\n");
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
      else if (nlohmann::ordered_json n = countJson(v); n.is_number_integer())
        out << n.get<int64_t>();
      else
        out << v;
    }
    out << "\n";
  }
}

}  // namespace kiln::driver
