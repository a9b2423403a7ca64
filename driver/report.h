// The compile report that `kiln compile --report` and `kiln train --report`
// write (schema: docs/report-schema.md), and the pass table both print.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/result.h"
#include "driver/compile.h"

namespace kiln::driver {

/// Version of the report schema; bump on any change a reader must know of
/// (docs/report-schema.md says what counts).
inline constexpr int kReportVersion = 1;

/// One trained step, for `kiln train --report`.
struct StepRecord {
  int64_t step = 0;
  double loss = 0;
  double millis = 0;  ///< wall time of the step, batch preparation excluded
  double lr = 0;
};

/// Peak resident set size of this process so far, in bytes (getrusage).
uint64_t peakRssBytes();

/// Fails early (before compiling) when `path` cannot be written: its
/// directory is missing or not writable, or it is a directory.
Status checkReportPath(const std::string& path);

/// The report of a compiled training step. `command` is "compile" or
/// "train"; `compile_ms` is the wall time from the start of the command to
/// the bound kernels (import included).
nlohmann::ordered_json buildReport(const std::string& command, const CompileOptions& a, const BoundStep& setup,
                                   double compile_ms);

/// Add the trained steps (train only).
void addSteps(nlohmann::ordered_json& report, const std::vector<StepRecord>& steps);

/// Add each node's measured time (train only): `node_ms` summed over
/// `steps` profiled steps, in graph order (CpuExecutor::nodeMillis).
void addNodeTimes(nlohmann::ordered_json& report, const std::vector<double>& node_ms, int64_t steps);

/// Write the report atomically (a failure leaves no file behind), after
/// checking it against the schema readers check it with (checkReport): a
/// report that breaks it is an internal error and writes nothing.
Status writeReport(const std::string& path, const nlohmann::ordered_json& report);

/// The pass table: pass, ms, changed, nodes, flops, estimated peak memory,
/// and each pass's statistics.
void printPassTable(std::ostream& out, const std::vector<PassTraceEntry>& trace);

}  // namespace kiln::driver
