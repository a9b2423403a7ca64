// A client of PyTorch's c10d TCPStore (torch.distributed.TCPStore): how
// Kiln's ranks meet under torchrun, whose agent already serves that store on
// MASTER_ADDR:MASTER_PORT and tells its workers so
// (TORCHELASTIC_USE_AGENT_STORE=True). Kiln's own TCP store cannot run
// there (the port is the agent's), so every rank is a client of the agent's
// store, with its keys under a namespace of the run id and restart attempt:
// two jobs on one agent store, or a restarted attempt, never meet.
//
// The wire protocol (torch/csrc/distributed/c10d/TCPStore.cpp): an opcode
// byte, then fields; strings and values as a u64 little-endian length and
// the bytes. PyTorch 2.2 renumbered the opcodes and requires a VALIDATE
// message (opcode 0, u32 magic) first on every connection; earlier servers
// (Debian's 1.13) take commands at once. The client finds out which by a
// probe that both understand safely (see c10d_store.cpp).
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

namespace kiln {

class C10dStore : public gloo::rendezvous::Store {
 public:
  /// The c10d store at host:port; keys are stored as `prefix` + key.
  /// Every operation gives up after `timeout` (get and wait: until the keys
  /// are set; connecting: the server may start late). Errors throw
  /// KilnException with one line naming the store.
  C10dStore(std::string host, int port, std::string prefix, std::chrono::milliseconds timeout);
  ~C10dStore() override;
  C10dStore(const C10dStore&) = delete;
  C10dStore& operator=(const C10dStore&) = delete;

  void set(const std::string& key, const std::vector<char>& data) override;
  /// Waits until `key` is set (up to the timeout), then reads it.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;
  /// Whether `key` is set now.
  bool check(const std::string& key);

  /// "host:port".
  std::string address() const;
  /// Which protocol the server speaks: "torch < 2.2" or "torch >= 2.2".
  std::string protocolName() const;

 private:
  using Clock = std::chrono::steady_clock;
  enum class Protocol { Unknown, Legacy, Validated };
  enum Query { kSet, kGet, kCheck, kWait, kNumKeys };

  /// The opcode of `q` in the server's numbering.
  char opcode(Query q) const;
  void connect(Clock::time_point deadline);
  Protocol probe(Clock::time_point deadline) const;
  /// Send one whole request; read `reply_bytes` fixed bytes of reply (0:
  /// none) into `reply`. Any failure drops the connection and throws.
  void roundTrip(const std::string& request, char* reply, size_t reply_bytes, Clock::time_point deadline,
                 const std::string& doing);
  std::string keysRequest(Query q, const std::vector<std::string>& keys) const;
  void dropConnection();

  std::string host_;
  int port_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
  Protocol protocol_ = Protocol::Unknown;
  std::mutex mu_;  // one request at a time on the connection
  int fd_ = -1;
};

}  // namespace kiln
