// Collective communication between the ranks of a data-parallel run.
//
// A Communicator connects `size()` processes (ranks); every collective is
// called by all of them in the same order with matching arguments, and
// returns on a rank once that rank's part is done. Implementations: Gloo
// between CPU processes (gloo_communicator.h: TCP on loopback, rendezvous
// through a TCP store on rank 0 or a shared directory) and NCCL between GPUs
// (backend/cuda). Collectives work in place on host memory here; the NCCL
// communicator takes device pointers and a stream.
//
// Errors throw KilnException with one line that says which collective, which
// rank and why: a peer that closed its connection (died), or one that did not
// arrive within the timeout. A communicator whose collective failed is broken
// for good: every later call fails at once.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/result.h"

namespace kiln {

/// Where and how the ranks meet.
struct CommOptions {
  int rank = 0;
  int world_size = 1;
  /// This rank among those of its machine, and how many they are
  /// (torchrun's LOCAL_RANK / LOCAL_WORLD_SIZE; default: rank, world_size):
  /// the ranks of one machine split its cores and its GPUs by them.
  int local_rank = 0;
  int local_world_size = 1;
  /// TCP store: rank 0 listens on master_addr:master_port, the others
  /// connect there (torchrun's MASTER_ADDR / MASTER_PORT).
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  /// The network interface Gloo's connections use (KILN_SOCKET_IFNAME, else
  /// GLOO_SOCKET_IFNAME); empty: the one with the route to master_addr.
  std::string socket_ifname;
  /// File store instead of TCP when set: a directory every rank can reach.
  std::string store_dir;
  /// torchrun: its agent serves a c10d TCPStore on master_addr:master_port
  /// (TORCHELASTIC_USE_AGENT_STORE=True); the ranks are its clients, with
  /// keys under agentStorePrefix (the run id and the restart attempt).
  bool agent_store = false;
  /// The job: KILN_JOB_ID, else TORCHELASTIC_RUN_ID. Kiln's TCP store
  /// serves one job, torchrun's agent store keeps jobs apart by it.
  std::string run_id = "none";
  /// The secret every client of Kiln's TCP store proves it knows
  /// (KILN_STORE_TOKEN; `kiln train --nproc` makes one per run). Empty: the
  /// store accepts any client, and rank 0 warns.
  std::string store_secret;
  int restart_count = 0;        ///< TORCHELASTIC_RESTART_COUNT
  /// How long a collective waits for the other ranks (KILN_COMM_TIMEOUT;
  /// PyTorch's default process-group timeout: 30 minutes, so a slow step
  /// is not a failure; a rank that dies is noticed at once anyway).
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  /// How long the ranks wait for each other to start (KILN_RENDEZVOUS_TIMEOUT;
  /// torchrun's join timeout: 10 minutes, for machines that start apart).
  std::chrono::milliseconds rendezvous_timeout{std::chrono::minutes(10)};
  /// How long the other ranks wait while rank 0 writes or reads a
  /// checkpoint (KILN_CHECKPOINT_TIMEOUT; an hour: a large model's
  /// weights and optimizer state on a slow disk).
  std::chrono::milliseconds checkpoint_timeout{std::chrono::hours(1)};
  /// The bounds of a timeout a user gives (--comm-timeout, KILN_COMM_TIMEOUT):
  /// beyond either it is a typo.
  static constexpr double kMinTimeoutSeconds = 0.001, kMaxTimeoutSeconds = 7 * 24 * 3600.0;
};

/// Where a run's keys live in torchrun's agent store: "/kiln/RUN_ID/attempt_N/".
std::string agentStorePrefix(const CommOptions& o);

/// The options torchrun-style launchers give a process: RANK, WORLD_SIZE,
/// MASTER_ADDR, MASTER_PORT (or KILN_STORE_DIR for a file store), and
/// KILN_COMM_TIMEOUT, KILN_RENDEZVOUS_TIMEOUT, KILN_CHECKPOINT_TIMEOUT
/// (seconds). nullopt-like: world_size 1 when RANK and
/// WORLD_SIZE are both unset; an error names a variable that is set but
/// malformed or inconsistent.
Result<CommOptions> commOptionsFromEnv();

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "gloo", "nccl".
  virtual std::string backend() const = 0;
  /// The algorithm allreduce uses, for the report ("ring", ...).
  virtual std::string allreduceAlgorithm() const = 0;

  /// Sum `count` elements of `dtype` at `data` over all ranks, in place:
  /// every rank ends with the same sum. Floating types f32, f64, f16, bf16
  /// and integer types i32, i64.
  virtual void allreduceSum(void* data, size_t count, DType dtype) = 0;
  /// Reduce-scatter in place: `data` holds sum(counts) elements on every
  /// rank; on return rank r's slice (counts[r] elements starting at
  /// counts[0] + ... + counts[r-1]) holds the sum of that slice over all
  /// ranks. The other slices hold unspecified values. counts.size() == size().
  virtual void reduceScatterSum(void* data, const std::vector<size_t>& counts, DType dtype) = 0;
  /// All-gather in place: `data` holds sum(counts) elements; rank r's slice
  /// (laid out as above) is its contribution; on return every slice holds its
  /// rank's contribution on every rank. Counts may differ and be 0.
  virtual void allGather(void* data, const std::vector<size_t>& counts, DType dtype) = 0;
  /// All-to-all with per-rank counts (MPI's alltoallv), out of place: `send`
  /// holds send_counts[0] elements for rank 0, then send_counts[1] for rank
  /// 1, ...; on return `recv` holds recv_counts[0] elements from rank 0, then
  /// recv_counts[1] from rank 1, ... Rank p's send_counts[q] must equal rank
  /// q's recv_counts[p]; the part a rank sends itself is copied locally.
  /// Counts may be 0 (a pair with nothing to say exchanges no message).
  /// send_counts.size() == recv_counts.size() == size(); `send` and `recv`
  /// must not overlap. Any dtype: elements are moved, not added.
  virtual void allToAll(const void* send, const std::vector<size_t>& send_counts, void* recv,
                        const std::vector<size_t>& recv_counts, DType dtype) = 0;
  /// Copy `bytes` at `data` from rank `root` to every rank.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  /// Returns once every rank has called it.
  virtual void barrier() = 0;
  /// The same, waiting up to `timeout` instead of the collective timeout
  /// (the ranks waiting while rank 0 writes a checkpoint).
  virtual void barrier(std::chrono::milliseconds timeout) = 0;
};

/// Connects to the other ranks through Gloo (TCP on the address
/// master_addr resolves to, loopback for local runs). Blocks until every rank
/// has arrived or `options.timeout` passed.
Result<std::unique_ptr<Communicator>> createGlooCommunicator(const CommOptions& options);

}  // namespace kiln
