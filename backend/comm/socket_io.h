// Deadline-bounded I/O on non-blocking TCP sockets, shared by the stores
// Kiln's ranks meet through (tcp_store.h, c10d_store.h): every wait ends at
// a deadline, so no peer that stalls or vanishes can hang a launch.
#pragma once

#include <netdb.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln {

using SocketClock = std::chrono::steady_clock;

enum class Io { Ok, Closed, Timeout };

/// Milliseconds until `deadline`, clamped to [0, INT_MAX].
int remainingMs(SocketClock::time_point deadline);
/// Wait for `events` (POLLIN, POLLOUT) on fd until the deadline.
Io waitFd(int fd, short events, SocketClock::time_point deadline);
/// All n bytes sent / received, or why not (a peer's close is Closed; a
/// send to a closed peer is an error, never SIGPIPE).
Io sendAll(int fd, const void* data, size_t n, SocketClock::time_point deadline);
Io recvAll(int fd, void* data, size_t n, SocketClock::time_point deadline);

/// Little-endian integers of `bytes` bytes.
void putLe(char* p, uint64_t v, int bytes);
uint64_t getLe(const char* p, int bytes);

void setNoDelay(int fd);
/// "localhost" as 127.0.0.1: it may resolve to ::1 on one side and
/// 127.0.0.1 on the other.
std::string normalizeHost(const std::string& host);

/// getaddrinfo for a TCP host and port, freed with the object.
struct AddrInfo {
  addrinfo* list = nullptr;
  int error = 0;
  AddrInfo(const std::string& host, int port);
  ~AddrInfo();
  AddrInfo(const AddrInfo&) = delete;
  AddrInfo& operator=(const AddrInfo&) = delete;
};

/// A connected non-blocking socket (TCP_NODELAY) to host:port, retrying
/// until the deadline because the server may start after its clients; -1
/// when the deadline passes. A host that does not resolve throws
/// KilnException naming `what` ("TCP store 10.0.0.1:29500").
int connectTcp(const std::string& host, int port, SocketClock::time_point deadline, const std::string& what);

}  // namespace kiln
