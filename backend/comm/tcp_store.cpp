// The TCP rendezvous store (tcp_store.h): a poll() server thread on rank 0
// and a client on every rank, over non-blocking POSIX sockets so that every
// wait is bounded by a deadline and no error can hang a launch.
//
// Wire format (all integers little-endian):
//   request: op (1 byte: 'S' set, 'G' get), key length (u32), value length
//            (u64, 0 for get), key bytes, value bytes
//   reply:   'K' (set done) | 'N' (get: not set yet) | 'Y' (get: found),
//            then for 'Y' the value length (u64) and the value bytes
#include "backend/comm/tcp_store.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

#include "backend/comm/socket_io.h"
#include "core/result.h"

namespace kiln {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string formatSeconds(milliseconds d) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(d.count()) / 1000.0);
  std::string s = buf;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s + " s";
}

namespace {

// Keys and values are tiny (addresses); anything larger is a stray client
// speaking another protocol, which we drop rather than allocate for.
constexpr uint32_t kMaxKey = 1 << 16;
constexpr uint64_t kMaxValue = uint64_t{1} << 28;
constexpr size_t kHeader = 1 + 4 + 8;

}  // namespace

// ---- server (rank 0) ---------------------------------------------------------

class TcpStore::Server {
 public:
  Server(const std::string& host, int port, const std::string& where) {
    AddrInfo ai(host, port);
    if (ai.error != 0) fail(where + ": cannot resolve '" + host + "' (" + ::gai_strerror(ai.error) + ")");
    int err = 0;
    for (addrinfo* a = ai.list; a && listen_fd_ < 0; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) {
        err = errno;
        continue;
      }
      // SO_REUSEADDR: a restarted run may reuse the port while the last run's
      // connections linger in TIME_WAIT. It does not allow a second listener.
      int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
        listen_fd_ = fd;
      } else {
        err = errno;
        ::close(fd);
      }
    }
    if (listen_fd_ < 0) {
      if (err == EADDRINUSE)
        fail(where + ": port " + std::to_string(port) +
             " is already in use on rank 0's machine (another run? choose another MASTER_PORT)");
      if (err == EADDRNOTAVAIL)
        fail(where + ": rank 0 cannot listen on '" + host +
             "', which is not an address of its machine (MASTER_ADDR must name rank 0's machine)");
      fail(where + ": rank 0 cannot listen there (" + std::strerror(err) + ")");
    }
    if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
      ::close(listen_fd_);
      fail(where + ": cannot create a pipe (" + std::strerror(errno) + ")");
    }
    thread_ = std::thread([this] { loop(); });
  }

  ~Server() {
    // The self-pipe wakes poll() at once; no timeout to wait out at exit.
    const char c = 'x';
    if (::write(wake_[1], &c, 1) < 0) {
      // The pipe is ours and empty; nothing to do if it failed anyway.
    }
    thread_.join();
    ::close(wake_[0]);
    ::close(wake_[1]);
    ::close(listen_fd_);
  }

 private:
  void loop() {
    std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    for (;;) {
      for (auto& p : fds) p.revents = 0;
      if (::poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (fds[0].revents) break;
      if (fds[1].revents & POLLIN) {
        const int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c >= 0) {
          setNoDelay(c);
          fds.push_back({c, POLLIN, 0});
        }
      }
      for (size_t i = 2; i < fds.size();) {
        if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) && !serve(fds[i].fd)) {
          ::close(fds[i].fd);
          fds.erase(fds.begin() + static_cast<std::ptrdiff_t>(i));
        } else {
          ++i;
        }
      }
    }
    for (size_t i = 2; i < fds.size(); ++i) ::close(fds[i].fd);
  }

  // One request from a readable client; false drops the client (it closed,
  // stalled mid-request, or does not speak this protocol).
  bool serve(int fd) {
    // A well-behaved client sends a request in one go; bound the stragglers
    // so one of them cannot stall the others' rendezvous.
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    char head[kHeader];
    if (recvAll(fd, head, kHeader, deadline) != Io::Ok) return false;
    const char op = head[0];
    const uint64_t klen = getLe(head + 1, 4), vlen = getLe(head + 5, 8);
    if ((op != 'S' && op != 'G') || klen > kMaxKey || vlen > kMaxValue || (op == 'G' && vlen != 0)) return false;
    std::string key(klen, '\0');
    std::vector<char> value(vlen);
    if (recvAll(fd, key.data(), klen, deadline) != Io::Ok) return false;
    if (recvAll(fd, value.data(), vlen, deadline) != Io::Ok) return false;
    if (op == 'S') {
      data_[key] = std::move(value);
      return sendAll(fd, "K", 1, deadline) == Io::Ok;
    }
    const auto it = data_.find(key);
    if (it == data_.end()) return sendAll(fd, "N", 1, deadline) == Io::Ok;
    char reply[9];
    reply[0] = 'Y';
    putLe(reply + 1, it->second.size(), 8);
    return sendAll(fd, reply, sizeof reply, deadline) == Io::Ok &&
           sendAll(fd, it->second.data(), it->second.size(), deadline) == Io::Ok;
  }

  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::thread thread_;
  std::map<std::string, std::vector<char>> data_;  // only the server thread touches it
};

// ---- client (every rank) -----------------------------------------------------

TcpStore::TcpStore(std::string host, int port, bool serve, milliseconds timeout)
    : host_(normalizeHost(host)), port_(port), timeout_(timeout) {
  if (port <= 0 || port > 65535) fail("TCP store " + address() + ": the port must be in 1..65535 (set MASTER_PORT)");
  if (serve) server_ = std::make_unique<Server>(host_, port_, "TCP store " + address());
}

TcpStore::~TcpStore() {
  dropConnection();
  server_.reset();
}

std::string TcpStore::address() const {
  return host_ + ":" + std::to_string(port_);
}

void TcpStore::noAnswer() const {
  fail("TCP store " + address() + ": no answer from rank 0 within " + formatSeconds(timeout_) +
       " (is MASTER_ADDR/MASTER_PORT right?)");
}

void TcpStore::dropConnection() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void TcpStore::connectUntil(Clock::time_point deadline) {
  fd_ = connectTcp(host_, port_, deadline, "TCP store " + address());
  if (fd_ < 0) noAnswer();
}

bool TcpStore::request(char op, const std::string& key, const std::vector<char>* value, std::vector<char>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto deadline = Clock::now() + timeout_;
  if (fd_ < 0) connectUntil(deadline);
  const uint64_t vlen = value ? value->size() : 0;
  std::vector<char> msg(kHeader + key.size() + vlen);
  msg[0] = op;
  putLe(msg.data() + 1, key.size(), 4);
  putLe(msg.data() + 5, vlen, 8);
  std::memcpy(msg.data() + kHeader, key.data(), key.size());
  if (vlen) std::memcpy(msg.data() + kHeader + key.size(), value->data(), vlen);

  char status = 0;
  Io io = sendAll(fd_, msg.data(), msg.size(), deadline);
  if (io == Io::Ok) io = recvAll(fd_, &status, 1, deadline);
  bool found = status == 'Y';
  if (io == Io::Ok && found) {
    char len[8];
    io = recvAll(fd_, len, 8, deadline);
    if (io == Io::Ok) {
      out->resize(getLe(len, 8));
      io = recvAll(fd_, out->data(), out->size(), deadline);
    }
  }
  if (io == Io::Ok && status != 'K' && status != 'N' && status != 'Y') io = Io::Closed;
  if (io != Io::Ok) {
    dropConnection();
    if (io == Io::Timeout) noAnswer();
    fail("TCP store " + address() + ": rank 0 closed the connection (did rank 0 exit?)");
  }
  return found;
}

void TcpStore::set(const std::string& key, const std::vector<char>& data) {
  request('S', key, &data, nullptr);
}

bool TcpStore::check(const std::string& key) {
  std::vector<char> ignored;
  return request('G', key, nullptr, &ignored);
}

std::vector<char> TcpStore::get(const std::string& key) {
  const auto deadline = Clock::now() + timeout_;
  std::vector<char> out;
  // Poll with a short backoff: a rendezvous waits for the slowest rank to
  // start, so a few milliseconds of latency do not matter.
  for (int pause = 1;; pause = std::min(pause * 2, 20)) {
    if (request('G', key, nullptr, &out)) return out;
    const int left = remainingMs(deadline);
    if (left <= 0)
      fail("TCP store " + address() + ": key '" + key + "' was not set within " + formatSeconds(timeout_) +
           " (did every rank start?)");
    std::this_thread::sleep_for(milliseconds(std::min(left, pause)));
  }
}

void TcpStore::wait(const std::vector<std::string>& keys, const milliseconds& timeout) {
  const auto deadline = Clock::now() + timeout;
  for (const auto& key : keys) {
    for (int pause = 1; !check(key); pause = std::min(pause * 2, 20)) {
      const int left = remainingMs(deadline);
      if (left <= 0)
        fail("TCP store " + address() + ": key '" + key + "' was not set within " + formatSeconds(timeout) +
             " (did every rank start?)");
      std::this_thread::sleep_for(milliseconds(std::min(left, pause)));
    }
  }
}

}  // namespace kiln
