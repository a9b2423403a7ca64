#include "backend/comm/socket_io.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <thread>

#include "core/result.h"

namespace kiln {

int remainingMs(SocketClock::time_point deadline) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SocketClock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, INT_MAX));
}

Io waitFd(int fd, short events, SocketClock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, remainingMs(deadline));
    if (r > 0) return Io::Ok;  // ready, or an error the next send/recv reports
    if (r == 0) return Io::Timeout;
    if (errno != EINTR) return Io::Closed;
  }
}

/// Moves all n bytes through `io` (send or recv: bytes moved, 0 for a closed
/// peer, < 0 with errno), waiting for `events` when the socket would block.
namespace {

template <typename IoFn>
Io transferAll(int fd, size_t n, short events, SocketClock::time_point deadline, IoFn io) {
  size_t done = 0;
  while (done < n) {
    const ssize_t k = io(done, n - done);
    if (k > 0) {
      done += static_cast<size_t>(k);
    } else if (k < 0 && errno == EINTR) {
      continue;
    } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const Io w = waitFd(fd, events, deadline);
      if (w != Io::Ok) return w;
    } else {
      return Io::Closed;  // 0: orderly close; <0: reset
    }
  }
  return Io::Ok;
}

}  // namespace

Io sendAll(int fd, const void* data, size_t n, SocketClock::time_point deadline) {
  const auto* p = static_cast<const char*>(data);
  // MSG_NOSIGNAL: a peer that went away must be an error, not SIGPIPE.
  return transferAll(fd, n, POLLOUT, deadline,
                     [&](size_t at, size_t left) { return ::send(fd, p + at, left, MSG_NOSIGNAL); });
}

Io recvAll(int fd, void* data, size_t n, SocketClock::time_point deadline) {
  auto* p = static_cast<char*>(data);
  return transferAll(fd, n, POLLIN, deadline, [&](size_t at, size_t left) { return ::recv(fd, p + at, left, 0); });
}

void putLe(char* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint64_t getLe(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

void setNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// "localhost" may resolve to ::1 on one side and 127.0.0.1 on the other.
std::string normalizeHost(const std::string& host) {
  return host == "localhost" ? "127.0.0.1" : host;
}

AddrInfo::AddrInfo(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  error = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &list);
}

AddrInfo::~AddrInfo() {
  if (list) ::freeaddrinfo(list);
}

int connectTcp(const std::string& host, int port, SocketClock::time_point deadline, const std::string& what) {
  AddrInfo ai(host, port);
  if (ai.error != 0)
    fail(what + ": cannot resolve '" + host + "' (" + ::gai_strerror(ai.error) + "; is MASTER_ADDR right?)");
  for (;;) {
    for (addrinfo* a = ai.list; a; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      bool ok = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0;
      if (!ok && errno == EINPROGRESS && waitFd(fd, POLLOUT, deadline) == Io::Ok) {
        int err = 0;
        socklen_t len = sizeof err;
        ok = ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
      }
      if (ok) {
        setNoDelay(fd);
        return fd;
      }
      ::close(fd);
    }
    const int left = remainingMs(deadline);
    if (left <= 0) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(left, 50)));
  }
}

}  // namespace kiln
