// Test helpers for the Gloo tests: connect a rank (throwing inside the
// child, where runRanks turns it into the rank's message), check how the
// ranks ended, and pick a free loopback port for a TCP store (bind port 0,
// read it, close it: the tiny race with another process taking it is
// accepted).
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <vector>

#include "backend/comm/communicator.h"
#include "tests/comm/rank_processes.h"

namespace kiln::testing {

inline int freePort() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    std::abort();
  ::close(s);
  return ntohs(a.sin_port);
}

inline std::unique_ptr<Communicator> connect(const CommOptions& o) {
  auto c = createGlooCommunicator(o);
  if (!c.ok()) throw std::runtime_error(c.error().message);
  return std::move(c.value());
}

inline void expectAllOk(const std::vector<RankOutcome>& out) {
  for (size_t r = 0; r < out.size(); ++r) {
    EXPECT_EQ(out[r].exit_code, 0) << "rank " << r << ": " << out[r].message;
    EXPECT_FALSE(out[r].timed_out) << "rank " << r;
  }
}

inline CommOptions tcpOptions(int rank, int n, int port, std::chrono::milliseconds timeout) {
  CommOptions o;
  o.rank = rank;
  o.world_size = n;
  o.master_addr = "127.0.0.1";
  o.master_port = port;
  o.timeout = timeout;
  o.rendezvous_timeout = timeout;
  o.store_secret = "kiln-test-secret";
  return o;
}

}  // namespace kiln::testing
