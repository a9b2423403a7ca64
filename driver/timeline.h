// The report's timeline (ReportTimeline): what ran when on which thread
// during the first recorded steps, made from the trace kiln train records
// (core/trace.h), and what the timeline view and the tests read from it:
// each row's busy, intra-op and idle time within a step.
//
// Rows: the executor thread first, then the pool threads in order, the data
// prefetch thread, the communication row, any other thread. Every pool
// thread of the executor gets a row even when no stage ran nodes side by
// side, because a kernel the executor runs alone is given the pool's
// threads (`threads` > 1): those spans are the pool threads' intra-op time.
// Whether the kernel kept each of them busy is not measured.
#pragma once

#include <cstdint>
#include <vector>

#include "core/trace.h"
#include "driver/report_types.h"

namespace kiln::driver {

/// The trace's steps and slices, times from the first step's start;
/// `threads`: the executor's pool (execution.threads).
ReportTimeline timelineFromTrace(const TraceRecorder& trace, int64_t threads);

struct RowActivity {
  double busy_ms = 0;      ///< the row's own node, data and comm slices (their union)
  double intra_op_ms = 0;  ///< pool rows: given to a kernel of the executor's, when not busy themselves
  double idle_ms = 0;      ///< the rest of the step, waits included
};

/// Per row of `t`, over the window of t.steps[step]: busy, intra-op and
/// idle time (they add up to the step's duration).
std::vector<RowActivity> rowActivity(const ReportTimeline& t, size_t step);

}  // namespace kiln::driver
