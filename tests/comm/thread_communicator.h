// Test helper: a Communicator over threads of one process, sharing memory.
// Algorithms built on the Communicator interface (sparse allreduce) can be
// unit-tested in milliseconds without forking ranks or a Gloo rendezvous.
// Each collective publishes this rank's buffer, meets the others at a
// barrier, reads their buffers, and meets again before anyone writes, so no
// rank sees a half-written buffer. Sums add in rank order 0..N-1.
#pragma once

#include <condition_variable>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/comm/communicator.h"
#include "core/result.h"

namespace kiln::testing {

/// State the ranks of one thread group share.
class ThreadGroup {
 public:
  explicit ThreadGroup(int n) : n_(n), ptrs_(n, nullptr), aux_(n, nullptr) {}
  int size() const { return n_; }
  void publish(int rank, void* p) { ptrs_[rank] = p; }
  void* ptr(int rank) const { return ptrs_[rank]; }
  /// A second published pointer (allToAll's send counts).
  void publishAux(int rank, const void* p) { aux_[rank] = p; }
  const void* aux(int rank) const { return aux_[rank]; }
  /// Generation barrier: returns once all n threads arrived.
  void arrive() {
    std::unique_lock<std::mutex> lock(mu_);
    const long gen = gen_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++gen_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return gen_ != gen; });
    }
  }

 private:
  int n_;
  std::vector<void*> ptrs_;       // written before, read after a barrier
  std::vector<const void*> aux_;  // likewise
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  long gen_ = 0;
};

class ThreadCommunicator : public Communicator {
 public:
  ThreadCommunicator(ThreadGroup& group, int rank) : g_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_.size(); }
  std::string backend() const override { return "threads"; }
  std::string allreduceAlgorithm() const override { return "rank-order"; }

  void allreduceSum(void* data, size_t count, DType dtype) override { reduceRange(data, 0, count, dtype); }
  void reduceScatterSum(void* data, const std::vector<size_t>& counts, DType dtype) override {
    size_t start = 0;
    for (int r = 0; r < rank_; ++r) start += counts[r];
    reduceRange(data, start, counts[rank_], dtype);
  }
  void allGather(void* data, const std::vector<size_t>& counts, DType dtype) override {
    const size_t es = dtypeSize(dtype);
    g_.publish(rank_, data);
    g_.arrive();
    size_t off = 0;
    for (int r = 0; r < size(); ++r) {
      if (r != rank_ && counts[r] > 0)
        std::memcpy(static_cast<char*>(data) + off * es, static_cast<char*>(g_.ptr(r)) + off * es, counts[r] * es);
      off += counts[r];
    }
    g_.arrive();  // nobody overwrites its slice before all have read it
  }
  /// Each rank reads its part of every sender's buffer: the offset comes
  /// from the sender's published send counts.
  void allToAll(const void* send, const std::vector<size_t>& send_counts, void* recv,
                const std::vector<size_t>& recv_counts, DType dtype) override {
    const size_t es = dtypeSize(dtype);
    g_.publish(rank_, const_cast<void*>(send));
    g_.publishAux(rank_, &send_counts);
    g_.arrive();
    size_t off = 0;
    for (int p = 0; p < size(); ++p) {
      const auto& theirs = *static_cast<const std::vector<size_t>*>(g_.aux(p));
      size_t from = 0;
      for (int q = 0; q < rank_; ++q) from += theirs[q];
      if (theirs[rank_] != recv_counts[p]) {
        g_.arrive();
        fail("ThreadCommunicator: rank " + std::to_string(p) + " sends " + std::to_string(theirs[rank_]) +
             " elements to rank " + std::to_string(rank_) + ", which expects " + std::to_string(recv_counts[p]));
      }
      if (recv_counts[p] > 0)
        std::memcpy(static_cast<char*>(recv) + off * es, static_cast<const char*>(g_.ptr(p)) + from * es,
                    recv_counts[p] * es);
      off += recv_counts[p];
    }
    g_.arrive();  // the senders' buffers and counts stay alive until all have read
  }
  void broadcast(void* data, size_t bytes, int root) override {
    g_.publish(rank_, data);
    g_.arrive();
    if (rank_ != root && bytes > 0) std::memcpy(data, g_.ptr(root), bytes);
    g_.arrive();
  }
  void barrier() override { g_.arrive(); }
  void barrier(std::chrono::milliseconds) override { g_.arrive(); }

 private:
  template <typename T>
  static void sumInto(std::vector<char>& out, const ThreadGroup& g, size_t start, size_t n) {
    T* o = reinterpret_cast<T*>(out.data());
    for (size_t i = 0; i < n; ++i) o[i] = T(0);
    for (int r = 0; r < g.size(); ++r) {
      const T* p = static_cast<const T*>(g.ptr(r)) + start;
      for (size_t i = 0; i < n; ++i) o[i] += p[i];
    }
  }
  void reduceRange(void* data, size_t start, size_t n, DType dtype) {
    const size_t es = dtypeSize(dtype);
    std::vector<char> out(n * es);
    g_.publish(rank_, data);
    g_.arrive();
    switch (dtype) {
      case DType::F32:
        sumInto<float>(out, g_, start, n);
        break;
      case DType::F64:
        sumInto<double>(out, g_, start, n);
        break;
      case DType::I32:
        sumInto<int32_t>(out, g_, start, n);
        break;
      case DType::I64:
        sumInto<int64_t>(out, g_, start, n);
        break;
      default:
        g_.arrive();
        fail("ThreadCommunicator: sum of " + std::string(dtypeName(dtype)) + " not supported");
    }
    g_.arrive();  // all have read every input before anyone writes its result
    if (n > 0) std::memcpy(static_cast<char*>(data) + start * es, out.data(), n * es);
  }

  ThreadGroup& g_;
  int rank_;
};

/// Run body(comm) on n threads, one rank each; returns each rank's exception
/// message ("" when it returned). A throwing rank leaves the others waiting,
/// so bodies must only throw after their last collective.
inline std::vector<std::string> runThreadRanks(int n, const std::function<void(Communicator&)>& body) {
  ThreadGroup group(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      ThreadCommunicator comm(group, r);
      try {
        body(comm);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace kiln::testing
