// Two reports of one model side by side (yesterday's run and today's, or
// two option sets): the numbers that decide which is better and where the
// difference comes from. `kiln compare-reports A.json B.json` prints it;
// kiln-studio's comparison shows the same rows.
//
// - summary: step time (median of the measured steps after the first),
//   peak memory, graph size and work, compile time, communication per step;
// - time by op, by module scope and by node: the kernels' measured time per
//   step summed per key on each side, sorted by the size of the difference
//   (what changed the step time most comes first); node counts per key,
//   which tell a fused or removed op apart from a slower kernel;
// - passes: each pass's nodes, flops and time on both sides, matched by
//   name and occurrence.
#pragma once

#include <cstddef>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "driver/report_types.h"

namespace kiln::driver {

struct ComparisonRow {
  std::string what;
  std::string unit;  ///< "ms", "B", "FLOP", "" (a count)
  std::optional<double> a, b;
};

/// One op, scope or node: its kernels' measured milliseconds per step and
/// its node count on each side.
struct TimeDelta {
  std::string key;
  double a_ms = 0, b_ms = 0;
  int64_t a_nodes = 0, b_nodes = 0;
  double diff() const { return b_ms - a_ms; }
};

struct PassDelta {
  std::string pass;  ///< "dce" or "dce #2" for its second run
  std::optional<ReportPass> a, b;
};

struct ReportComparison {
  std::vector<ComparisonRow> summary;
  /// Both reports carry measured kernel times (kiln train --report).
  bool measured = false;
  std::vector<TimeDelta> by_op, by_scope, by_node;
  std::vector<PassDelta> passes;
};

ReportComparison compareReports(const Report& a, const Report& b);

/// "0.82x" (B/A, two decimals; one from 10x), "" when either is missing or A is 0.
std::string ratioText(std::optional<double> a, std::optional<double> b);

/// The median step time of a trained report (steps after the first, which
/// pays for warm-up), nullopt without steps.
std::optional<double> medianStepMillis(const Report& r);

/// The comparison as text: the summary, then the `top` largest differences
/// by op, scope and node, then the passes. `name_a`, `name_b` head the
/// columns.
void printComparison(std::ostream& out, const ReportComparison& c, const std::string& name_a,
                     const std::string& name_b, size_t top = 10);

}  // namespace kiln::driver
