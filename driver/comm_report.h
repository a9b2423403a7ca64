// The communication of a data-parallel run, as the report and `kiln comm`
// show it: per step, per collective (a gradient bucket's allreduce, the
// loss's, the buffers' broadcast), what it moved and how much of its time
// the backward hid.
#pragma once

#include <ostream>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/comm/collective_engine.h"

namespace kiln::driver {

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

/// report["communication"]: ranks, backend, and every step's collectives.
void addCommunication(nlohmann::ordered_json& report, int ranks, const std::string& backend,
                      const std::vector<CommStep>& steps);

/// The table `kiln comm` prints: one row per collective of the last step,
/// then a line per step (comm time, exposed time, overlap).
void printCommTable(std::ostream& out, int ranks, const std::string& backend, const std::vector<CommStep>& steps);

}  // namespace kiln::driver
