#include "driver/comm_report.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "driver/messages.h"
#include "driver/model_args.h"

namespace kiln::driver {
namespace {

std::string ms(double v) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(v < 10 ? 3 : 1) << v;
  return s.str();
}

std::string percent(double v) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(0) << 100 * v << "%";
  return s.str();
}

std::string bucketName(const CollectiveRecord& r) {
  if (r.collective == "broadcast") return "buffers";
  if (r.bucket == -2) return "norm";  // ZeRO-1's clipping norm (passes/optimizer.cpp)
  return r.bucket < 0 ? "loss" : std::to_string(r.bucket);
}

}  // namespace

double CommStep::commMillis() const {
  double t = 0;
  for (const CollectiveRecord& r : collectives) t += r.end_ms - r.begin_ms;
  return t;
}

double CommStep::exposedMillis() const {
  double t = 0;
  for (const CollectiveRecord& r : collectives) t += r.waited_ms;
  return t;
}

double CommStep::overlap() const {
  const double comm = commMillis();
  return comm > 0 ? std::clamp(1 - exposedMillis() / comm, 0.0, 1.0) : 1.0;
}

uint64_t CommStep::denseBytes() const {
  uint64_t b = 0;
  for (const CollectiveRecord& r : collectives) b += r.dense_bytes;
  return b;
}

uint64_t CommStep::sentBytes() const {
  uint64_t b = 0;
  for (const CollectiveRecord& r : collectives) b += r.sent_bytes;
  return b;
}

void addCommunication(Report& report, int ranks, const std::string& backend, const std::vector<CommStep>& steps) {
  report.communication = ReportCommunication{ranks, backend, steps};
}

void printCommTable(std::ostream& out, int ranks, const std::string& backend, const std::vector<CommStep>& steps) {
  if (steps.empty()) return;
  const CommStep& last = steps.back();
  out << "communication of step " << last.step << " (" << ranks << " ranks, " << backend
      << "; bytes sent by rank 0; dense allreduce: the ring's 2(N-1)/N x size; reduce-scatter and all-gather: "
         "the ring's, all slices but one):\n";
  out << std::left << std::setw(9) << "bucket" << std::setw(15) << "collective" << std::setw(16) << "algorithm"
      << std::right << std::setw(8) << "tensors" << std::setw(12) << "dense" << std::setw(12) << "sent" << std::setw(8)
      << "sent%" << std::setw(10) << "ms" << std::setw(10) << "hidden"
      << "\n";
  for (const CollectiveRecord& r : last.collectives) {
    const double comm = r.end_ms - r.begin_ms;
    out << std::left << std::setw(9) << bucketName(r) << std::setw(15) << r.collective << std::setw(16) << r.algorithm
        << std::right << std::setw(8) << r.tensors << std::setw(12)
        << humanCount(static_cast<double>(r.dense_bytes), "B") << std::setw(12)
        << humanCount(static_cast<double>(r.sent_bytes), "B") << std::setw(8)
        << (r.dense_bytes ? percent(static_cast<double>(r.sent_bytes) / static_cast<double>(r.dense_bytes)) : "-")
        << std::setw(10) << ms(comm) << std::setw(10)
        << (comm > 0 ? percent(std::clamp(1 - r.waited_ms / comm, 0.0, 1.0)) : "-") << "\n";
  }
  out << "per step: step ms, communication ms (on the wire), exposed ms (the step waited), overlap (hidden share):\n";
  for (const CommStep& s : steps)
    out << "  step " << std::setw(4) << s.step << std::setw(10) << ms(s.step_ms) << " ms  comm " << std::setw(9)
        << ms(s.commMillis()) << " ms  exposed " << std::setw(9) << ms(s.exposedMillis()) << " ms  overlap "
        << std::setw(5) << percent(s.overlap()) << "  sent " << humanCount(static_cast<double>(s.sentBytes()), "B")
        << " of " << humanCount(static_cast<double>(s.denseBytes()), "B") << " dense\n";
}

}  // namespace kiln::driver
