// The memory timeline of a compiled step (passes/memory_plan.h) as the
// report's `memory` object and as `kiln memory`'s text: totals, the peak,
// the largest tensors alive there, and a sparkline of live bytes over the
// schedule.
#pragma once

#include <ostream>

#include "driver/report_types.h"
#include "passes/memory_plan.h"

namespace kiln::driver {

/// The report's `memory` object (docs/report-schema.md).
ReportMemory memoryReport(const MemoryPlan& plan);

/// Totals, the `top` largest tensors alive at the peak, and the timeline as
/// a sparkline `width` characters wide.
void printMemorySummary(std::ostream& os, const MemoryPlan& plan, size_t top = 10, size_t width = 64);

/// Live bytes over the schedule as block characters (▁ to █), each the
/// maximum over its share of nodes.
std::string sparkline(const std::vector<uint64_t>& values, size_t width);

}  // namespace kiln::driver
