// The communication of a data-parallel run, as the report and `kiln comm`
// show it: per step, per collective (a gradient bucket's allreduce, the
// loss's, the buffers' broadcast), what it moved and how much of its time
// the backward hid.
#pragma once

#include <ostream>
#include <vector>

#include "driver/report_types.h"

namespace kiln::driver {

/// report.communication: ranks, backend, and every step's collectives.
void addCommunication(Report& report, int ranks, const std::string& backend,
                      const std::vector<CommStep>& steps);

/// The table `kiln comm` prints: one row per collective of the last step,
/// then a line per step (comm time, exposed time, overlap).
void printCommTable(std::ostream& out, int ranks, const std::string& backend, const std::vector<CommStep>& steps);

}  // namespace kiln::driver
