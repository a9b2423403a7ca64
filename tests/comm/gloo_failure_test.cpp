// Tests of how the Gloo communicator fails, with real rank processes: a
// rank that never arrives (file and TCP store), one that dies between
// collectives, one that is late, and a store directory a previous run used.
// Each failure must be one line that names the collective, the rank and a
// cause, within about the timeout, never a hang.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gloo/rendezvous/file_store.h>

#include "backend/comm/communicator.h"
#include "tests/comm/gloo_test_helpers.h"
#include "tests/comm/rank_processes.h"

namespace kiln {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::connect;
using testing::expectAllOk;
using testing::freePort;
using testing::runRanks;
using testing::tcpOptions;

// (a) A rank that never arrives: the others fail within about the timeout,
// naming it, instead of hanging.
TEST(GlooFailure, RankNeverArrivesFileStore) {
  const auto t0 = Clock::now();
  const auto out = runRanks(
      3,
      [](int rank, const CommOptions& o) {
        if (rank != 2) connect(o);
      },
      2s);
  const auto took = Clock::now() - t0;
  EXPECT_EQ(out[2].exit_code, 0);
  for (int r : {0, 1}) {
    EXPECT_EQ(out[r].exit_code, 1) << out[r].message;
    EXPECT_NE(out[r].message.find("rendezvous (rank " + std::to_string(r) + " of 3): rank 2 did not arrive within 2 s"),
              std::string::npos)
        << out[r].message;
    EXPECT_EQ(out[r].message.find('\n'), std::string::npos);
    std::printf("rank %d: %s\n", r, out[r].message.c_str());
  }
  EXPECT_LT(took, 6s);
}

TEST(GlooFailure, RankZeroNeverArrivesTcpStore) {
  const int port = freePort();
  const auto t0 = Clock::now();
  const auto out = runRanks(3, [port](int rank, const CommOptions&) {
    if (rank != 0) connect(tcpOptions(rank, 3, port, 2s));
  });
  const auto took = Clock::now() - t0;
  for (int r : {1, 2}) {
    EXPECT_EQ(out[r].exit_code, 1) << out[r].message;
    EXPECT_NE(out[r].message.find("no answer from rank 0 within 2 s (is MASTER_ADDR/MASTER_PORT right?)"),
              std::string::npos)
        << out[r].message;
    std::printf("rank %d: %s\n", r, out[r].message.c_str());
  }
  EXPECT_LT(took, 6s);
}

// (b) A rank dies between collectives: the others' next collective fails
// with a line that says so, well before the timeout, and stays failed.
TEST(GlooFailure, RankDiesBetweenCollectives) {
  const int n = 4;
  const auto timeout = 10s;
  const auto out = runRanks(
      n,
      [timeout](int rank, const CommOptions& o) {
        auto comm = connect(o);
        std::vector<float> v(100000, 1.0f);
        comm->allreduceSum(v.data(), v.size(), DType::F32);
        if (rank == 2) _exit(3);
        const auto t0 = Clock::now();
        try {
          comm->allreduceSum(v.data(), v.size(), DType::F32);
        } catch (const KilnException& e) {
          const auto took = Clock::now() - t0;
          if (took > timeout / 2) throw std::runtime_error("BAD: failing took too long: " + std::string(e.what()));
          // Broken for good: the next call fails at once with the same line.
          const auto t1 = Clock::now();
          try {
            comm->barrier();
          } catch (const KilnException& again) {
            if (std::string(again.what()) != e.what() || Clock::now() - t1 > 100ms)
              throw std::runtime_error("BAD: second failure: " + std::string(again.what()));
            throw;
          }
          throw std::runtime_error("BAD: barrier after a failure succeeded");
        }
        throw std::runtime_error("BAD: allreduce without rank 2 succeeded");
      },
      timeout);
  EXPECT_EQ(out[2].exit_code, 3);
  for (int r : {0, 1, 3}) {
    EXPECT_EQ(out[r].exit_code, 1) << out[r].message;
    EXPECT_NE(out[r].message.find("allreduce (rank " + std::to_string(r) + " of 4): a peer closed its connection"),
              std::string::npos)
        << out[r].message;
    std::printf("rank %d: %s\n", r, out[r].message.c_str());
  }
}

// A rank that is alive but late: whoever waits on it times out after the
// timeout, and the failure spreads to the rest (closed connections) instead
// of leaving them to wait out their own timeouts.
TEST(GlooFailure, SlowRankTimesOutTheCollective) {
  const auto t0 = Clock::now();
  const auto out = runRanks(
      3,
      [](int rank, const CommOptions& o) {
        auto comm = connect(o);
        if (rank == 2) std::this_thread::sleep_for(2500ms);
        std::vector<float> v(1000, 1.0f);
        comm->allreduceSum(v.data(), v.size(), DType::F32);
      },
      1s);
  const auto took = Clock::now() - t0;
  int timed_out = 0;
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(out[r].exit_code, 1) << out[r].message;
    const std::string head = "allreduce (rank " + std::to_string(r) + " of 3): ";
    timed_out += out[r].message == head + "timed out after 1 s waiting for the other ranks";
    EXPECT_TRUE(out[r].message == head + "timed out after 1 s waiting for the other ranks" ||
                out[r].message == head + "a peer closed its connection (did a rank die or fail?)")
        << out[r].message;
    std::printf("rank %d: %s\n", r, out[r].message.c_str());
  }
  EXPECT_GE(timed_out, 1);
  EXPECT_LT(took, 4s);
}

// Gloo's FileStore refuses to set a key that exists, so the ranks remove
// their keys after a good rendezvous and the directory serves the next run;
// files a crashed run left behind give a clear line, not Gloo's.
TEST(GlooFileStore, DirectoryServesTheNextRun) {
  char tmpl[] = "/tmp/kiln-store-XXXXXX";
  ASSERT_TRUE(mkdtemp(tmpl));
  const std::string dir = tmpl;
  for (int run = 0; run < 2; ++run)
    expectAllOk(runRanks(2, [&dir](int rank, const CommOptions& o) {
      auto comm = connect(testing::fileStoreOptions(dir, rank, 2, o.timeout));
      comm->barrier();
    }));
  EXPECT_TRUE(std::filesystem::is_empty(dir));

  gloo::rendezvous::FileStore stale(dir);
  stale.set("kiln/arrived/0", {'1'});
  const auto comm = createGlooCommunicator(testing::fileStoreOptions(dir, 0, 2, 5s));
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.error().message.find("rendezvous (rank 0 of 2): file store " + dir +
                                      ": rank 0's key is already there: a previous run left its files"),
            std::string::npos)
      << comm.error().message;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln
