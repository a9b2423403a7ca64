// The compile report that `kiln compile --report` and `kiln train --report`
// write (types: driver/report_types.h; schema: docs/report-schema.md), and
// the pass table both print.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "core/result.h"
#include "driver/compile.h"
#include "driver/report_types.h"

namespace kiln::driver {

/// Peak resident set size of this process so far, in bytes (getrusage).
uint64_t peakRssBytes();

/// Fails early (before compiling) when `path` cannot be written: its
/// directory is missing or not writable, or it is a directory.
Status checkReportPath(const std::string& path);

/// The report of a compiled training step. `command` is "compile" or
/// "train"; `compile_ms` is the wall time from the start of the command to
/// the bound kernels (import included).
Report buildReport(const std::string& command, const CompileOptions& a, const BoundStep& setup, double compile_ms);

/// Add the trained steps (train only).
void addSteps(Report& report, const std::vector<StepRecord>& steps);

/// Add each node's measured time (train only): `node_ms` summed over
/// `steps` profiled steps, in graph order (CpuExecutor::nodeMillis).
void addNodeTimes(Report& report, const std::vector<double>& node_ms, int64_t steps);

/// Write the report's JSON (driver/report_json.h) atomically: a failure
/// leaves no file behind.
Status writeReport(const std::string& path, const Report& report);

/// The pass table: pass, ms, changed, nodes, flops, estimated peak memory,
/// and each pass's statistics.
void printPassTable(std::ostream& out, const std::vector<PassTraceEntry>& trace);

}  // namespace kiln::driver
