// Tests of the Gloo communicator's collectives with real rank processes
// (fork) talking over loopback: every collective and dtype for 2, 3 and 4
// ranks (odd sizes catch ring bugs), through both rendezvous stores.
// gloo_failure_test.cpp has the failures, tcp_store_test.cpp the TCP store
// alone, comm_env_test.cpp the environment parsing.
// Values are chosen so every sum is exact in its dtype (small integers for
// f16/bf16), so expectations follow from the fill formula, not from numerics.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backend/comm/communicator.h"
#include "core/tensor.h"
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

const DType kSumTypes[] = {DType::F32, DType::F64, DType::I32, DType::I64, DType::F16, DType::BF16};

// Element i of rank r's buffer. f32 sums stay below 2^24 for 4 ranks and
// 2^20+3 elements; f16/bf16 sums stay below 100, exact in both.
double value(DType t, int r, size_t i) {
  switch (t) {
    case DType::F16:
    case DType::BF16:
      return (r + 1) * static_cast<double>(i % 7 + 1);
    case DType::F64:
      return r * 1000.0 + static_cast<double>(i) + 0.5;
    case DType::I32:
      return r * 1000.0 + static_cast<double>(i) - 5000;
    case DType::I64:
      return r * 1e12 + static_cast<double>(i);  // needs 64 bits
    default:
      return r * 1000.0 + static_cast<double>(i);
  }
}

double sumOverRanks(DType t, int n, size_t i) {
  double s = 0;
  for (int r = 0; r < n; ++r) s += value(t, r, i);
  return s;
}

void put(void* p, DType t, size_t i, double v) {
  switch (t) {
    case DType::F32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case DType::F64:
      static_cast<double*>(p)[i] = v;
      break;
    case DType::I32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      break;
    case DType::I64:
      static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
      break;
    case DType::F16:
      static_cast<uint16_t*>(p)[i] = floatToHalf(static_cast<float>(v));
      break;
    case DType::BF16:
      static_cast<uint16_t*>(p)[i] = floatToBf16(static_cast<float>(v));
      break;
    default:
      throw std::runtime_error("test: unexpected dtype");
  }
}

double get(const void* p, DType t, size_t i) {
  switch (t) {
    case DType::F32:
      return static_cast<const float*>(p)[i];
    case DType::F64:
      return static_cast<const double*>(p)[i];
    case DType::I32:
      return static_cast<const int32_t*>(p)[i];
    case DType::I64:
      return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::F16:
      return halfToFloat(static_cast<const uint16_t*>(p)[i]);
    case DType::BF16:
      return bf16ToFloat(static_cast<const uint16_t*>(p)[i]);
    default:
      throw std::runtime_error("test: unexpected dtype");
  }
}

// Inside a child: a wrong value throws, and runRanks reports the message.
void expectValue(const std::string& what, const void* p, DType t, size_t i, double expected) {
  const double got = get(p, t, i);
  if (got != expected)
    throw std::runtime_error(what + " " + std::string(dtypeName(t)) + ": element " + std::to_string(i) + " is " +
                             std::to_string(got) + ", expected " + std::to_string(expected));
}

// Uneven per-rank counts, one of them 0 (rank 1's).
std::vector<size_t> unevenCounts(int n, size_t scale) {
  const size_t pattern[] = {5, 0, 17, 3};
  std::vector<size_t> c(n);
  for (int r = 0; r < n; ++r) c[r] = pattern[r % 4] * scale + (pattern[r % 4] ? r : 0);
  return c;
}

class GlooRanks : public ::testing::TestWithParam<int> {};

TEST_P(GlooRanks, AllreduceSumEveryDtypeAndSize) {
  const int n = GetParam();
  expectAllOk(runRanks(n, [n](int rank, const CommOptions& o) {
    auto comm = connect(o);
    if (comm->size() != n || comm->rank() != rank || comm->backend() != "gloo") throw std::runtime_error("identity");
    for (DType t : kSumTypes)
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, (size_t{1} << 20) + 3}) {
        std::vector<char> buf(count * dtypeSize(t) + 1);
        for (size_t i = 0; i < count; ++i) put(buf.data(), t, i, value(t, rank, i));
        comm->allreduceSum(buf.data(), count, t);
        for (size_t i = 0; i < count; ++i)
          expectValue("allreduce n=" + std::to_string(count), buf.data(), t, i, sumOverRanks(t, n, i));
      }
  }));
}

TEST_P(GlooRanks, ReduceScatterUnevenCounts) {
  const int n = GetParam();
  expectAllOk(runRanks(n, [n](int rank, const CommOptions& o) {
    auto comm = connect(o);
    for (size_t scale : {size_t{1}, size_t{40000}})
      for (DType t : kSumTypes) {
        const auto counts = unevenCounts(n, scale);
        size_t total = 0, mine = 0;
        for (int r = 0; r < n; ++r) {
          if (r == rank) mine = total;
          total += counts[r];
        }
        std::vector<char> buf(total * dtypeSize(t) + 1);
        for (size_t i = 0; i < total; ++i) put(buf.data(), t, i, value(t, rank, i));
        comm->reduceScatterSum(buf.data(), counts, t);
        for (size_t i = mine; i < mine + counts[rank]; ++i)
          expectValue("reduce-scatter", buf.data(), t, i, sumOverRanks(t, n, i));
      }
  }));
}

TEST_P(GlooRanks, AllGatherUnevenCounts) {
  const int n = GetParam();
  expectAllOk(runRanks(n, [n](int rank, const CommOptions& o) {
    auto comm = connect(o);
    for (size_t scale : {size_t{1}, size_t{40000}})
      for (DType t : {DType::F32, DType::I64, DType::BF16}) {
        const auto counts = unevenCounts(n, scale);
        std::vector<int> owner;
        for (int r = 0; r < n; ++r) owner.insert(owner.end(), counts[r], r);
        std::vector<char> buf(owner.size() * dtypeSize(t) + 1);
        for (size_t i = 0; i < owner.size(); ++i) put(buf.data(), t, i, owner[i] == rank ? value(t, rank, i) : -3);
        comm->allGather(buf.data(), counts, t);
        for (size_t i = 0; i < owner.size(); ++i) expectValue("all-gather", buf.data(), t, i, value(t, owner[i], i));
      }
  }));
}

TEST_P(GlooRanks, BroadcastFromFirstAndLastRank) {
  const int n = GetParam();
  expectAllOk(runRanks(n, [n](int rank, const CommOptions& o) {
    auto comm = connect(o);
    for (int root : {0, n - 1})
      for (size_t bytes : {size_t{0}, size_t{1}, size_t{1000003}}) {
        auto pattern = [root](size_t i) { return static_cast<char>((i * 131 + root * 7) & 0xff); };
        std::vector<char> buf(bytes + 1, static_cast<char>(0xee));
        if (rank == root)
          for (size_t i = 0; i < bytes; ++i) buf[i] = pattern(i);
        comm->broadcast(buf.data(), bytes, root);
        for (size_t i = 0; i < bytes; ++i)
          if (buf[i] != pattern(i))
            throw std::runtime_error("broadcast from " + std::to_string(root) + ": byte " + std::to_string(i));
        if (buf[bytes] != static_cast<char>(0xee)) throw std::runtime_error("broadcast wrote past the end");
      }
  }));
}

TEST_P(GlooRanks, BarrierWaitsForTheSlowestRank) {
  const int n = GetParam();
  expectAllOk(runRanks(n, [n](int rank, const CommOptions& o) {
    auto comm = connect(o);
    comm->barrier();
    const auto t0 = Clock::now();
    std::this_thread::sleep_for(rank * 100ms);
    comm->barrier();
    const auto waited = Clock::now() - t0;
    // The last rank slept (n-1)*100 ms; nobody may leave before that (less
    // the skew with which the first barrier released the ranks).
    if (waited < (n - 1) * 100ms - 30ms) throw std::runtime_error("barrier returned before the last rank arrived");
  }));
}

TEST_P(GlooRanks, ManyMixedCollectivesInARow) {
  const int n = GetParam();
  expectAllOk(runRanks(n, [n](int rank, const CommOptions& o) {
    auto comm = connect(o);
    // Different sizes and kinds back to back: a collective that picked up
    // another's messages (a tag mix-up) shows up as a wrong value or a hang.
    for (int k = 0; k < 300; ++k) {
      const std::string what = "step " + std::to_string(k);
      if (k % 4 == 0) {
        const size_t count = k % 13 + 1;
        std::vector<int64_t> v(count);
        for (size_t i = 0; i < count; ++i) v[i] = rank * 100 + k + static_cast<int64_t>(i);
        comm->allreduceSum(v.data(), count, DType::I64);
        for (size_t i = 0; i < count; ++i)
          if (v[i] != 100 * n * (n - 1) / 2 + n * (k + static_cast<int64_t>(i))) throw std::runtime_error(what);
      } else if (k % 4 == 1) {
        const int root = k % n;
        std::vector<int32_t> v(k % 17 + 1, rank == root ? k : -1);
        comm->broadcast(v.data(), v.size() * 4, root);
        for (int32_t x : v)
          if (x != k) throw std::runtime_error(what);
      } else if (k % 4 == 2) {
        std::vector<size_t> counts(n);
        for (int r = 0; r < n; ++r) counts[r] = (k + r) % 5;
        std::vector<int32_t> v;
        std::vector<int32_t> want;
        for (int r = 0; r < n; ++r)
          for (size_t i = 0; i < counts[r]; ++i) {
            v.push_back(r == rank ? k * 10 + r : -1);
            want.push_back(k * 10 + r);
          }
        comm->allGather(v.data(), counts, DType::I32);
        if (v != want) throw std::runtime_error(what);
      } else {
        std::vector<size_t> counts(n, static_cast<size_t>(k % 3));
        std::vector<float> v(counts[0] * n, static_cast<float>(rank + k));
        comm->reduceScatterSum(v.data(), counts, DType::F32);
        for (size_t i = rank * counts[0]; i < (rank + 1) * counts[0]; ++i)
          if (v[i] != static_cast<float>(n * (n - 1) / 2 + n * k)) throw std::runtime_error(what);
      }
    }
  }));
}

TEST_P(GlooRanks, TcpStoreRendezvous) {
  const int n = GetParam();
  const int port = freePort();
  expectAllOk(runRanks(n, [n, port](int rank, const CommOptions&) {
    auto comm = connect(tcpOptions(rank, n, port, 20s));
    std::vector<float> v(1000, static_cast<float>(rank));
    comm->allreduceSum(v.data(), v.size(), DType::F32);
    for (float x : v)
      if (x != static_cast<float>(n * (n - 1) / 2)) throw std::runtime_error("allreduce over the TCP store");
    comm->barrier();
  }));
}

// All-to-all: rank p sends rank q cell(p, q, i) for i < a2aCount(p, q).
// Counts are uneven, some 0 (the self part of rank 0 among them), and with
// scale 0 every count is 0. Values stay below 128 plus a per-dtype offset,
// exact in every dtype (bf16 included).
size_t a2aCount(int p, int q, size_t scale) {
  return static_cast<size_t>((p * 7 + q * 3) % 4) * scale + (scale && (p + q) % 4 == 1 ? 1 : 0);
}
double cell(DType t, int p, int q, size_t i) {
  const double v = (p * 4 + q) * 8 + static_cast<double>(i % 7);
  return t == DType::I64 ? v + 1e12 * (p + 1) : t == DType::I32 ? v - 1000 * q : v;
}

TEST_P(GlooRanks, AllToAllUnevenAndZeroCounts) {
  const int n = GetParam();
  expectAllOk(runRanks(n, [n](int rank, const CommOptions& o) {
    auto comm = connect(o);
    for (size_t scale : {size_t{0}, size_t{1}, size_t{30011}})
      for (DType t : kSumTypes) {
        std::vector<size_t> sc(n), rc(n);
        size_t st = 0, rt = 0;
        for (int q = 0; q < n; ++q) {
          st += sc[q] = a2aCount(rank, q, scale);
          rt += rc[q] = a2aCount(q, rank, scale);
        }
        const size_t es = dtypeSize(t);
        std::vector<char> send(st * es + 1), recv((rt + 1) * es, static_cast<char>(0x5a));
        size_t at = 0;
        for (int q = 0; q < n; ++q)
          for (size_t i = 0; i < sc[q]; ++i) put(send.data(), t, at++, cell(t, rank, q, i));
        comm->allToAll(send.data(), sc, recv.data(), rc, t);
        const std::string what = "all-to-all scale " + std::to_string(scale) + " from rank";
        at = 0;
        for (int p = 0; p < n; ++p)
          for (size_t i = 0; i < rc[p]; ++i, ++at)
            expectValue(what + " " + std::to_string(p), recv.data(), t, at, cell(t, p, rank, i));
        for (size_t b = rt * es; b < recv.size(); ++b)
          if (recv[b] != static_cast<char>(0x5a)) throw std::runtime_error("all-to-all wrote past the end");
      }
    // Tags stay in step with the other collectives: one after the other.
    std::vector<int64_t> v(1, rank);
    comm->allreduceSum(v.data(), 1, DType::I64);
    if (v[0] != n * (n - 1) / 2) throw std::runtime_error("allreduce after all-to-all");
  }));
}

INSTANTIATE_TEST_SUITE_P(Gloo, GlooRanks, ::testing::Values(2, 3, 4), ::testing::PrintToStringParamName());

TEST(GlooCommunicator, SingleRankIsLocal) {
  CommOptions o;  // world_size 1: no store, no sockets
  auto comm = connect(o);
  EXPECT_EQ(comm->allreduceAlgorithm(), "bcube");
  std::vector<float> v = {1, 2, 3};
  comm->allreduceSum(v.data(), 3, DType::F32);
  comm->reduceScatterSum(v.data(), {3}, DType::F32);
  comm->allGather(v.data(), {3}, DType::F32);
  comm->broadcast(v.data(), 12, 0);
  comm->barrier();
  EXPECT_EQ(v, (std::vector<float>{1, 2, 3}));
  EXPECT_THROW(comm->broadcast(v.data(), 12, 1), KilnException);
  EXPECT_THROW(comm->allreduceSum(v.data(), 3, DType::I8), KilnException);
  EXPECT_THROW(comm->allGather(v.data(), {1, 2}, DType::F32), KilnException);
}

TEST(GlooCommunicator, SingleRankAllToAllCopies) {
  auto comm = connect(CommOptions{});
  const std::vector<int32_t> send = {4, 5, 6};
  std::vector<int32_t> recv(3, 0);
  comm->allToAll(send.data(), {3}, recv.data(), {3}, DType::I32);
  EXPECT_EQ(recv, send);
  comm->allToAll(nullptr, {0}, nullptr, {0}, DType::I32);
  EXPECT_THROW(comm->allToAll(send.data(), {3}, recv.data(), {2}, DType::I32), KilnException);
  EXPECT_THROW(comm->allToAll(send.data(), {1, 2}, recv.data(), {3}, DType::I32), KilnException);
}
}  // namespace
}  // namespace kiln
