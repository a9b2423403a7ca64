// A Gloo rendezvous store over TCP (torchrun's MASTER_ADDR:MASTER_PORT).
//
// Debian's Gloo ships only file, hash and Redis stores, and a data-parallel
// launch on several machines has no shared directory to rely on. So rank 0
// runs a key-value server thread on master_addr:master_port and every rank,
// rank 0 included, talks to it as a client: one request, one reply, on one
// connection per client; a blocking get is the client polling until the key
// is there. Every client first proves it knows the job's secret and the
// server proves it back (store_protocol.h); the server serves its clients
// side by side from one poll() loop, within store::Limits.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "backend/comm/socket_io.h"
#include "backend/comm/store_protocol.h"

namespace kiln {

/// "2 s", "2.5 s", "0.05 s": a duration for an error line.
std::string formatSeconds(std::chrono::milliseconds d);

/// Who may use a store: the clients that know `secret` (KILN_STORE_TOKEN;
/// empty: anyone who speaks the protocol) and belong to `job` (KILN_JOB_ID).
struct StoreIdentity {
  std::string secret;
  std::string job = "none";
};

class TcpStore : public gloo::rendezvous::Store {
 public:
  /// A client of the store at host:port; `serve` (rank 0) also starts the
  /// server there, bound to that address. Every operation gives up after
  /// `timeout` (get: until the key is set; connecting: rank 0's server may
  /// start late). Errors throw KilnException with one line; a port in use
  /// fails here, at once; a server of another job or secret is refused at
  /// the first request.
  TcpStore(std::string host, int port, bool serve, std::chrono::milliseconds timeout, StoreIdentity identity = {},
           store::Limits limits = {});
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::vector<char>& data) override;
  /// Blocks until `key` is set (up to the store's timeout).
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;
  /// Whether `key` is set now (does not wait for it).
  bool check(const std::string& key);

  /// "host:port", as errors name the store.
  std::string address() const;

 private:
  class Server;
  using Clock = std::chrono::steady_clock;

  /// One request/reply round trip; returns whether the key was found (get).
  bool request(char op, const std::string& key, const std::vector<char>* value, std::vector<char>* out);
  void connectUntil(Clock::time_point deadline);
  /// The greeting, hello and verdict on a new connection (store_protocol.h).
  void handshake(Clock::time_point deadline);
  [[noreturn]] void broken(Io io);
  void dropConnection();
  [[noreturn]] void noAnswer() const;

  std::string host_;
  int port_;
  std::chrono::milliseconds timeout_;
  StoreIdentity identity_;
  store::Limits limits_;
  std::unique_ptr<Server> server_;
  std::mutex mu_;  // one request at a time on the client connection
  int fd_ = -1;
};

}  // namespace kiln
