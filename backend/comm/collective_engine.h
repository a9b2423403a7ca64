// Runs a step's collectives (allreduce of gradient buckets, broadcast of
// buffers) on a communication thread, so they overlap the compute that
// follows them.
//
// The CPU executor calls start() when it reaches a collective node: the
// inputs are copied into the node's staging buffer at once (so the
// executor may reuse their memory right away), the communication thread
// then reduces the staging buffer with the communicator and writes the
// results into the node's outputs. The executor calls wait() before the
// first node that reads an output, and waitAll() at the end of the step.
// Collectives run one at a time in the order they were started, which is
// the same on every rank (every rank runs the same graph in the same order).
//
// Each collective leaves a record (bytes, time on the wire, time the
// executor waited for it) for the report and `kiln comm`.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backend/comm/collective_record.h"
#include "backend/comm/communicator.h"
#include "core/collective_layout.h"
#include "core/ir.h"
#include "core/tensor.h"

namespace kiln {

class CollectiveEngine {
 public:
  /// `sparse_max_ratio`: a sparse allreduce falls back to dense beyond this
  /// times the dense ring's bytes (sparse_allreduce.h).
  explicit CollectiveEngine(std::shared_ptr<Communicator> comm, double sparse_max_ratio = 1.0);
  ~CollectiveEngine();
  CollectiveEngine(const CollectiveEngine&) = delete;
  CollectiveEngine& operator=(const CollectiveEngine&) = delete;

  Communicator& communicator() { return *comm_; }
  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }

  /// Start node `index`'s collective (`n`: a collective op's node).
  /// `outs` must already be bound to their buffers (they are written later,
  /// on the communication thread); `ins` are copied before this returns.
  void start(size_t index, const Node& n, std::span<const Tensor> ins, std::span<const Tensor> outs);
  /// Block until node `index`'s collective is complete; rethrows its error.
  void wait(size_t index);
  /// Wait for every started collective; rethrows the first error.
  void waitAll();
  /// Wait for every started collective and drop their errors (cleanup after
  /// a failed step, so nothing writes into the arena of the next one).
  void drain() noexcept;

  /// The origin of the records' times: the start of the current step.
  void beginStep();
  /// That origin (the trace places the records' times with it).
  std::chrono::steady_clock::time_point stepOrigin() const { return step_origin_; }
  /// The records of the collectives since the last call, in start order.
  std::vector<CollectiveRecord> takeRecords();

 private:
  struct Job;
  void loop();
  void startDense(Job& job, const Node& n, std::span<const Tensor> ins, std::span<const Tensor> outs);
  void startRows(Job& job, const Node& n, std::span<const Tensor> ins, std::span<const Tensor> outs);
  void run(Job& job);
  void runRows(Job& job);
  double sinceStep() const;

  std::shared_ptr<Communicator> comm_;
  double sparse_max_ratio_;
  std::chrono::steady_clock::time_point step_origin_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::unordered_map<size_t, std::shared_ptr<Job>> started_;  ///< by node index, until waited for
  std::vector<CollectiveRecord> records_;
  /// Per node index: its staging buffers and its layout (reused every step;
  /// the communication thread reads a layout through its job's pointer,
  /// which later insertions leave valid).
  std::unordered_map<size_t, std::vector<std::vector<unsigned char>>> staging_;
  std::unordered_map<size_t, CollectiveLayout> layouts_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace kiln
