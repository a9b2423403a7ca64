// Test helpers shared by the block-sparse allreduce tests
// (sparse_allreduce_test.cpp: results; sparse_allreduce_bytes_test.cpp: bytes):
// a failure recorder that lets a rank finish its collectives before it throws
// (a rank that throws early leaves the others hanging), the rank runners for
// threads and Gloo processes, and the bytes a process really wrote.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/comm/communicator.h"
#include "tests/comm/rank_processes.h"
#include "tests/comm/thread_communicator.h"

namespace kiln::sparse_test {

constexpr double kForceSparse = std::numeric_limits<double>::infinity();

/// Records the first failed check; the body throws it after its last collective.
struct Checks {
  std::string first;
  void expect(bool ok, const std::string& what) {
    if (!ok && first.empty()) first = what;
  }
  void throwIfFailed() const {
    if (!first.empty()) throw std::runtime_error(first);
  }
};

inline int64_t sumOverRanks(Communicator& c, int64_t v) {
  c.allreduceSum(&v, 1, DType::I64);
  return v;
}

/// Bytes this process wrote through system calls (sockets included), -1
/// where /proc/self/io cannot be read.
inline long bytesWritten() {
  std::ifstream f("/proc/self/io");
  std::string key;
  long v = 0;
  while (f >> key >> v)
    if (key == "wchar:") return v;
  return -1;
}

inline void expectAllOk(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

inline void expectAllOk(const std::vector<testing::RankOutcome>& outs) {
  for (size_t r = 0; r < outs.size(); ++r)
    EXPECT_TRUE(outs[r].exit_code == 0 && !outs[r].timed_out)
        << "rank " << r << " exit " << outs[r].exit_code << (outs[r].timed_out ? " (timed out)" : "") << ": "
        << outs[r].message;
}

/// Each of n rank processes connects through Gloo and runs `body`.
inline std::vector<testing::RankOutcome> glooRanks(int n, void (*body)(Communicator&)) {
  return testing::runRanks(n, [body](int, const CommOptions& o) {
    auto comm = createGlooCommunicator(o);
    if (!comm.ok()) throw std::runtime_error("createGlooCommunicator: " + comm.error().message);
    body(**comm);
  });
}

}  // namespace kiln::sparse_test
