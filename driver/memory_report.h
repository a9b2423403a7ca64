// The memory timeline of a compiled step (passes/memory_plan.h) as the
// report's `memory` object and as `kiln memory`'s text: totals, the peak,
// the largest tensors alive there, and a sparkline of live bytes over the
// schedule.
#pragma once

#include <ostream>

#include "driver/report_types.h"
#include "passes/memory_plan.h"

namespace kiln::driver {

/// What a step's bytes are, in the order the memory view stacks them:
/// parameters (and buffers, and their updates), optimizer state, gradients
/// (of the parameters, on their way to the optimizer), activations (made by
/// the forward, kept for the backward), temporaries (the rest of what nodes
/// make), communication (what collectives make), the batch, and the step's
/// other outputs (loss, metrics).
const std::vector<std::string>& memoryCategoryNames();

/// The report's `memory` object (docs/report-schema.md). With the graph
/// the plan is of, each tensor gets its category, and the peak is split by
/// category; without it (a plan alone) categories stay empty.
ReportMemory memoryReport(const MemoryPlan& plan, const Graph* graph = nullptr);

/// Totals, the `top` largest tensors alive at the peak, and the timeline as
/// a sparkline `width` characters wide.
void printMemorySummary(std::ostream& os, const MemoryPlan& plan, size_t top = 10, size_t width = 64,
                        const Graph* graph = nullptr);

/// Live bytes over the schedule as block characters (▁ to █), each the
/// maximum over its share of nodes.
std::string sparkline(const std::vector<uint64_t>& values, size_t width);

}  // namespace kiln::driver
