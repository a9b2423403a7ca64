// The compile report (docs/report-schema.md) as C++ types: what `kiln
// compile/train --report` fills and writes, what kiln-studio and the Python
// module read. Its JSON form is made and read by one field list per type
// (driver/report_json.cpp), so a key cannot be renamed on one side only,
// and a report from elsewhere is checked as it is read: a missing or
// retyped key is an error naming it and the version, not a field left 0.
//
// Plain data and no heavy headers: kiln-studio's views include it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/comm/collective_record.h"

namespace kiln::driver {

/// Version of the report schema; bump on any change a reader must know of
/// (docs/report-schema.md says what counts).
inline constexpr int kReportVersion = 1;

struct ReportModel {
  std::string path;    ///< the MODEL argument as given
  std::string format;  ///< "torchscript" or "fx"
  int64_t param_tensors = 0, params = 0, param_bytes = 0, trainable_params = 0;
};

struct ReportBatchInput {
  std::string name, type;
};

struct ReportCrossEntropy {
  double label_smoothing = 0;
  int64_t ignore_index = -100;
  std::vector<double> class_weights;
};

struct ReportTraining {
  std::string loss, optimizer;
  double lr = 0;
  std::string lr_schedule;
  int64_t warmup_steps = 0;
  double weight_decay = 0, clip_grad_norm = 0;
  uint64_t memory_budget = 0;  ///< bytes; 0: none
  ReportCrossEntropy cross_entropy;
  std::vector<std::string> freeze, frozen;
  std::vector<ReportBatchInput> batch;
  std::string batch_source;
};

struct ReportPass {
  std::string name;
  double millis = 0;
  bool changed = false;
  int64_t nodes = 0;
  double flops = 0;
  uint64_t peak_bytes = 0;
  std::string hash;
  std::vector<std::pair<std::string, double>> statistics;  ///< in the pass's order
  std::optional<std::string> ir_before;                    ///< --report-pass-ir, first entry only
  std::optional<std::string> ir;                           ///< --report-pass-ir, when changed
};

struct ReportGraph {
  int64_t nodes = 0;
  double flops = 0;
  uint64_t peak_bytes = 0;
  std::string hash;
  std::optional<std::string> ir;
};

struct ReportTensor {
  std::string value, type;
  uint64_t bytes = 0;
  std::string kind;  ///< "input", "returned" or "intermediate"
  std::string producer, scope;
  int64_t first = 0, last = 0;
  std::optional<int64_t> offset;  ///< in the arena; none for inputs and returned buffers (JSON null)
  std::vector<std::string> views;
  bool rematerialized = false;
  /// What the bytes are (memoryCategoryNames()); "" in reports written
  /// before categories existed.
  std::string category;
};

/// One category's bytes at the peak (they add up to memory.peak_bytes).
struct ReportCategory {
  std::string name;
  uint64_t bytes = 0;
};

struct ReportMemory {
  std::string schedule, rules;
  bool widened_to_stages = false;
  uint64_t peak_bytes = 0;
  int64_t peak_node = 0;
  std::string peak_at;
  uint64_t op_by_op_peak_bytes = 0, input_bytes = 0, returned_bytes = 0, arena_bytes = 0, arena_lower_bound = 0,
           unshared_bytes = 0;
  std::vector<uint64_t> timeline;  ///< live bytes while each node runs
  std::vector<ReportTensor> tensors;
  /// The peak by category, in memoryCategoryNames() order (empty in reports
  /// written before categories existed).
  std::vector<ReportCategory> categories;
};

struct ReportTiming {
  std::string kernel;
  double millis = 0;
  std::optional<std::string> error;
};

struct ReportKernel {
  std::string node, kernel, dialect;
  int64_t stage = 0;
  /// The node's op and module scope, and its cost from the op table
  /// (flops: a multiply-add counts 2; bytes read plus written): what
  /// comparisons group by and a roofline places it with. Reports written
  /// before these existed lack them (empty, 0).
  std::string op, scope;
  double flops = 0, bytes = 0;
  /// The precision its arithmetic runs in: "bf16" or "f16" when an input is
  /// of that type, else the widest float input's ("f32", "f64"); what the
  /// roofline takes the compute roof by. Empty in older reports.
  std::string dtype;
  std::optional<double> measured_ms;  ///< kiln train --report: mean over the profiled steps
  std::vector<ReportTiming> autotune;
};

struct ReportKernelSelection {
  std::string dialects;
  bool autotune = false;
};

struct ReportExecution {
  int64_t threads = 0;
  bool concurrent_nodes = false;
  int64_t stages = 0, shared_stages = 0, nodes_in_shared_stages = 0, widest_stage = 0;
  std::optional<int64_t> profiled_steps;
};

struct ReportCache {
  std::string status, dir, key, entry;
  double load_millis = 0;
  std::string problem;
};

struct ReportCompile {
  double millis = 0, import_millis = 0;
  int64_t imports = 0;
  double passes_millis = 0, build_millis = 0;
  uint64_t peak_rss_bytes = 0;
};

/// One trained step, for `kiln train --report`.
struct StepRecord {
  int64_t step = 0;
  double loss = 0;
  double millis = 0;  ///< wall time of the step, batch preparation excluded
  double lr = 0;
};

/// The collectives of one step (rank 0's view: its bytes sent).
struct CommStep {
  int64_t step = 0;
  double step_ms = 0;  ///< the whole step's wall time
  std::vector<CollectiveRecord> collectives;
  /// Time on the wire, summed over the collectives (begin to end).
  double commMillis() const;
  /// The part of it the executor waited for (not hidden behind compute).
  double exposedMillis() const;
  /// Hidden share of the communication time: 1 - exposed / comm (1 with none).
  double overlap() const;
  uint64_t denseBytes() const;
  uint64_t sentBytes() const;
};

struct ReportCommunication {
  int64_t ranks = 0;
  std::string backend;
  std::vector<CommStep> steps;
};

/// One row of the timeline: an executor thread, a pool thread, the data
/// prefetch thread, or the communication thread's collectives.
struct TimelineRow {
  std::string name;
  std::string kind;  ///< "executor", "pool", "prefetch", "comm" or "" (another thread)
  int64_t thread = 0;  ///< pool rows: the OpenMP thread number (1, 2, ...)
};

/// One slice of the timeline.
struct TimelineSlice {
  int64_t row = 0;  ///< index into ReportTimeline::rows
  /// "node" (a kernel ran), "data" (a batch was made), "comm" (a collective
  /// on the wire), "wait" (blocked on a batch or a collective: idle).
  std::string category;
  std::string name;                  ///< the op, "batch 3", "bucket 2", "wait for allreduce"
  double start_ms = 0, dur_ms = 0;   ///< from the start of the first recorded step
  int64_t node = -1;                 ///< node slices (and waits): index into `kernels`
  int64_t threads = 0;               ///< node slices: the threads the kernel was given
  std::string detail;                ///< what the tooltip adds (kernel, bytes, queue time, ...)
};

struct TimelineStep {
  int64_t step = 0;
  double start_ms = 0, end_ms = 0;
};

/// What ran when on which thread during the first recorded steps (kiln
/// train --report; the --trace file's slices).
struct ReportTimeline {
  std::vector<TimelineRow> rows;
  std::vector<TimelineStep> steps;
  std::vector<TimelineSlice> slices;
};

/// What the machine can do (kiln bench --machine): the roofs of a roofline.
struct ReportMachine {
  std::string cpu;  ///< the CPU's model name
  int64_t threads = 0;
  double fp32_gemm_flops = 0;                 ///< FLOP/s of Kiln's f32 matmul at the measured size
  std::optional<double> bf16_gemm_flops;      ///< where the CPU has bf16 instructions
  double bandwidth_bytes = 0;                 ///< bytes/s read plus written by a large elementwise add
  int64_t gemm_size = 0;                      ///< n of the n x n x n products measured
  std::string measured_at;                    ///< when (UTC, ISO 8601)
};

/// A recipe's schedule point (kiln train --freeze-schedule, ...): from
/// `step` on, the run trains a step compiled with other options.
struct ReportSchedulePoint {
  int64_t step = 0;
  std::string change;  ///< what changed, in words ("freeze layer1")
  double compile_ms = 0;  ///< compiling (or loading from the cache) and binding the new step
  std::string cache;      ///< the compile cache's answer: hit, miss, rebuilt or off
  int64_t nodes = 0;      ///< the new step graph's nodes
  int64_t trainable_params = 0;  ///< parameter elements it trains
};

/// One held-out evaluation (kiln train --eval-data), after `step` steps.
struct ReportEvaluation {
  int64_t step = 0;
  double train_seconds = 0;  ///< training wall time up to here, evaluations excluded
  double eval_ms = 0;        ///< this evaluation's own time
  double loss = 0;           ///< mean over the evaluation batches
  std::optional<double> accuracy;    ///< classification (cross_entropy)
  std::optional<double> perplexity;  ///< exp(loss), cross_entropy
};

/// When the run first reached --target (kiln train --target).
struct ReportTarget {
  std::string metric;
  double value = 0;  ///< the target
  bool reached = false;
  std::optional<int64_t> step;            ///< the evaluation that reached it
  std::optional<double> train_seconds;    ///< training wall time to it (evaluations excluded)
};

/// kiln train's recipe: its schedule points, evaluations and target.
struct ReportRecipe {
  std::vector<ReportSchedulePoint> schedule;
  std::vector<ReportEvaluation> evaluations;
  std::optional<ReportTarget> target;
};

struct Report {
  std::string schema = "kiln-report";
  int64_t version = kReportVersion;
  std::string kiln_version;
  std::string command;  ///< "compile" or "train"
  ReportModel model;
  /// Every option of the option table by name (driver/option_table.h
  /// optionsJson/optionsFromJson); empty in reports written before it was.
  nlohmann::ordered_json options = nlohmann::ordered_json::object();
  ReportTraining training;
  std::vector<ReportPass> passes;
  ReportGraph graph;
  ReportMemory memory;
  std::vector<ReportKernel> kernels;
  ReportKernelSelection kernel_selection;
  std::string device;
  ReportExecution execution;
  ReportCache cache;
  ReportCompile compile;
  std::optional<std::vector<StepRecord>> steps;       ///< kiln train
  std::optional<ReportCommunication> communication;  ///< kiln train --nproc N
  std::optional<ReportTimeline> timeline;            ///< kiln train
  std::optional<ReportMachine> machine;              ///< kiln train, after kiln bench --machine
  std::optional<ReportRecipe> recipe;                ///< kiln train with --eval-data or a schedule
};

}  // namespace kiln::driver
