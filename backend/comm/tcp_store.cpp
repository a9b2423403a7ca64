// The TCP rendezvous store (tcp_store.h): a poll() server thread on rank 0
// that serves every client side by side, and a client on every rank, over
// non-blocking POSIX sockets so that every wait is bounded by a deadline
// and no error can hang a launch. The messages are in store_protocol.h.
#include "backend/comm/tcp_store.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <utility>

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

constexpr size_t kReadChunk = size_t{1} << 16;

// "10.0.0.5:41234" for a log line.
std::string peerName(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  char host[NI_MAXHOST] = "?", serv[NI_MAXSERV] = "?";
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0)
    ::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof host, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV);
  return std::string(host) + ":" + serv;
}

}  // namespace

// ---- server (rank 0) ---------------------------------------------------------

class TcpStore::Server {
 public:
  Server(const std::string& host, int port, std::string where, StoreIdentity identity, store::Limits limits)
      : where_(std::move(where)), identity_(std::move(identity)), data_(limits) {
    AddrInfo ai(host, port);
    if (ai.error != 0) fail(where_ + ": cannot resolve '" + host + "' (" + ::gai_strerror(ai.error) + ")");
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
      if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
        listen_fd_ = fd;
      } else {
        err = errno;
        ::close(fd);
      }
    }
    if (listen_fd_ < 0) {
      if (err == EADDRINUSE)
        fail(where_ + ": port " + std::to_string(port) +
             " is already in use on rank 0's machine (another run? choose another MASTER_PORT)");
      if (err == EADDRNOTAVAIL)
        fail(where_ + ": rank 0 cannot listen on '" + host +
             "', which is not an address of its machine (MASTER_ADDR must name rank 0's machine)");
      fail(where_ + ": rank 0 cannot listen there (" + std::strerror(err) + ")");
    }
    if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
      ::close(listen_fd_);
      fail(where_ + ": cannot create a pipe (" + std::strerror(errno) + ")");
    }
    // One descriptor per rank: a run of thousands needs more than the usual
    // soft limit of 1024.
    rlimit rl{};
    if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
      rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, limits.max_connections + 256);
      ::setrlimit(RLIMIT_NOFILE, &rl);
    }
    thread_ = std::thread([this] { run(); });
  }

  ~Server() {
    // The self-pipe wakes poll() at once; no timeout to wait out at exit.
    const char c = 'x';
    if (::write(wake_[1], &c, 1) < 0) {
      // The pipe is ours and empty; nothing to do if it failed anyway.
    }
    thread_.join();
    for (auto& c : conns_) ::close(c.fd);
    ::close(wake_[0]);
    ::close(wake_[1]);
    ::close(listen_fd_);
  }

 private:
  struct Conn {
    int fd = -1;
    std::unique_ptr<store::StoreSession> session;
    std::string out;  // to send; out_at bytes of it sent
    size_t out_at = 0;
    Clock::time_point hello_deadline;
    bool closing = false;  // close once `out` is sent
    // After a refusal is sent: the write side is shut and what the client
    // still sends (the rest of an oversized value) is read and dropped until
    // it closes or drain_until, so that closing with unread bytes does not
    // reset the connection and lose the refusal on the client's side.
    bool draining = false;
    Clock::time_point drain_until;
  };

  // Every exception is caught here or per connection below: the thread
  // must never take the process down (std::terminate) or die silently.
  void run() {
    try {
      loop();
    } catch (const std::exception& e) {
      log("stopped: " + std::string(e.what()) + "; the ranks that still need it will fail");
    }
  }

  void log(const std::string& line) const {
    std::fprintf(stderr, "kiln: warning: %s: %s\n", where_.c_str(), line.c_str());
  }

  void loop() {
    std::vector<pollfd> fds;
    Clock::time_point accept_paused_until{};
    for (;;) {
      const auto now = Clock::now();
      const bool accepting = conns_.size() < data_.limits().max_connections && now >= accept_paused_until;
      fds.assign({{wake_[0], POLLIN, 0}, {listen_fd_, static_cast<short>(accepting ? POLLIN : 0), 0}});
      int wait_ms = -1;
      auto sooner = [&](Clock::time_point t) {
        const int ms = remainingMs(t) + 1;
        wait_ms = wait_ms < 0 ? ms : std::min(wait_ms, ms);
      };
      if (!accepting && conns_.size() < data_.limits().max_connections) sooner(accept_paused_until);
      for (const Conn& c : conns_) {
        // Read only once the replies so far are sent: a client that does
        // not read cannot make the server buffer without bound.
        fds.push_back({c.fd, static_cast<short>(c.out_at < c.out.size() ? POLLOUT : POLLIN), 0});
        if (!c.session->authenticated()) sooner(c.hello_deadline);
        if (c.draining) sooner(c.drain_until);
      }
      if (::poll(fds.data(), fds.size(), wait_ms) < 0) {
        if (errno == EINTR) continue;
        throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
      }
      if (fds[0].revents) return;
      const size_t polled = conns_.size();  // those accepted below are served from the next round
      if (fds[1].revents & POLLIN) accept_paused_until = acceptAll();
      std::vector<bool> drop(polled, false);
      for (size_t i = 0; i < polled; ++i) {
        try {
          drop[i] = !serve(conns_[i], fds[i + 2].revents);
        } catch (const std::exception& e) {
          log("dropped the client at " + peerName(conns_[i].fd) + ": " + e.what());
          drop[i] = true;
        }
      }
      for (size_t i = polled; i-- > 0;)
        if (drop[i]) {
          ::close(conns_[i].fd);
          conns_.erase(conns_.begin() + static_cast<std::ptrdiff_t>(i));
        }
    }
  }

  // Accept every waiting connection up to the cap; when the process is out
  // of descriptors, pause accepting for a moment instead of spinning.
  Clock::time_point acceptAll() {
    while (conns_.size() < data_.limits().max_connections) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          log(std::string("cannot accept more clients for now (") + std::strerror(errno) + ")");
          return Clock::now() + milliseconds(100);
        }
        return {};  // EAGAIN: all taken; anything else: that client is gone
      }
      setNoDelay(fd);
      store::Nonce nonce{};
      store::randomBytes(nonce.data(), nonce.size());
      Conn c;
      c.fd = fd;
      c.session = std::make_unique<store::StoreSession>(data_, identity_.secret, identity_.job, nonce);
      c.out = c.session->greeting();
      c.hello_deadline = Clock::now() + data_.limits().hello_timeout;
      conns_.push_back(std::move(c));
    }
    return {};
  }

  // Progress on one connection; false drops it.
  bool serve(Conn& c, short revents) {
    if (c.draining) {
      if (Clock::now() >= c.drain_until) return false;
      if (!(revents & (POLLIN | POLLHUP | POLLERR))) return true;
      char buf[kReadChunk];
      const ssize_t k = ::recv(c.fd, buf, sizeof buf, 0);
      return k > 0 || (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
    }
    if (c.out_at < c.out.size()) {
      if (revents & (POLLERR | POLLHUP)) return false;
      if (revents & POLLOUT) {
        const ssize_t k = ::send(c.fd, c.out.data() + c.out_at, c.out.size() - c.out_at, MSG_NOSIGNAL);
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
        if (k > 0) c.out_at += static_cast<size_t>(k);
      }
    } else if (revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[kReadChunk];
      const ssize_t k = ::recv(c.fd, buf, sizeof buf, 0);
      if (k == 0) return false;  // the client is done
      if (k < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      c.out.erase(0, c.out_at);
      c.out_at = 0;
      if (!c.session->consume(buf, static_cast<size_t>(k), c.out)) closeAfterSending(c);
    }
    if (c.out_at == c.out.size()) {
      c.out.clear();
      c.out_at = 0;
      if (c.closing) {
        ::shutdown(c.fd, SHUT_WR);  // the refusal is sent: the client reads it, then sees the end
        c.draining = true;
        c.drain_until = Clock::now() + std::chrono::seconds(2);
        return true;
      }
      // Replies held back while the client was not reading.
      if (c.session->buffered() > 0 && !c.session->consume(nullptr, 0, c.out)) closeAfterSending(c);
    }
    if (!c.session->authenticated() && !c.closing && Clock::now() >= c.hello_deadline) {
      log("dropped the client at " + peerName(c.fd) + ": no hello within " +
          formatSeconds(data_.limits().hello_timeout));
      return false;
    }
    return true;
  }

  void closeAfterSending(Conn& c) {
    c.closing = true;
    log("refused the client at " + peerName(c.fd) + ": " + c.session->why());
  }

  std::string where_;
  StoreIdentity identity_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::thread thread_;
  store::StoreData data_;   // only the server thread touches it
  std::vector<Conn> conns_;  // likewise; declared after data_, destroyed before it
};

// ---- client (every rank) -----------------------------------------------------

TcpStore::TcpStore(std::string host, int port, bool serve, milliseconds timeout, StoreIdentity identity,
                   store::Limits limits)
    : host_(normalizeHost(host)), port_(port), timeout_(timeout), identity_(std::move(identity)), limits_(limits) {
  if (port <= 0 || port > 65535) fail("TCP store " + address() + ": the port must be in 1..65535 (set MASTER_PORT)");
  if (identity_.job.size() > store::kMaxJob)
    fail("TCP store " + address() + ": the job name is longer than " + std::to_string(store::kMaxJob) + " bytes");
  if (serve) server_ = std::make_unique<Server>(host_, port_, "TCP store " + address(), identity_, limits_);
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

void TcpStore::broken(Io io) {
  dropConnection();
  if (io == Io::Timeout) noAnswer();
  fail("TCP store " + address() + ": rank 0 closed the connection (did rank 0 exit?)");
}

void TcpStore::dropConnection() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void TcpStore::connectUntil(Clock::time_point deadline) {
  fd_ = connectTcp(host_, port_, deadline, "TCP store " + address());
  if (fd_ < 0) noAnswer();
  handshake(deadline);
}

void TcpStore::handshake(Clock::time_point deadline) {
  const std::string at = "TCP store " + address() + ": ";
  // The magic first: something else on the port may say less than a greeting.
  char greeting[store::kGreetingBytes];
  Io io = recvAll(fd_, greeting, sizeof store::kMagic + 1, deadline);
  if (io == Io::Timeout) broken(io);
  if (io != Io::Ok || std::memcmp(greeting, store::kMagic, sizeof store::kMagic) != 0 ||
      static_cast<uint8_t>(greeting[sizeof store::kMagic]) != store::kVersion) {
    dropConnection();
    fail(at + "what answers there is not a Kiln " KILN_VERSION
              " store (another program on MASTER_PORT, or ranks of different Kiln versions?)");
  }
  io = recvAll(fd_, greeting + sizeof store::kMagic + 1, store::kNonceBytes, deadline);
  if (io != Io::Ok) broken(io);
  store::Nonce server{}, client{};
  std::memcpy(server.data(), greeting + sizeof store::kMagic + 1, server.size());
  store::randomBytes(client.data(), client.size());
  const store::Mac proof = store::clientProof(identity_.secret, server, client, identity_.job);
  std::string hello(reinterpret_cast<const char*>(client.data()), client.size());
  char len[2];
  putLe(len, identity_.job.size(), 2);
  hello.append(len, 2);
  hello += identity_.job;
  hello.append(reinterpret_cast<const char*>(proof.data()), proof.size());
  char verdict = 0;
  io = sendAll(fd_, hello.data(), hello.size(), deadline);
  if (io == Io::Ok) io = recvAll(fd_, &verdict, 1, deadline);
  if (io != Io::Ok) broken(io);
  if (verdict == 'A') {
    store::Mac theirs{};
    if (Io r = recvAll(fd_, theirs.data(), theirs.size(), deadline); r != Io::Ok) broken(r);
    if (store::sameMac(theirs, store::serverProof(identity_.secret, server, client, identity_.job))) return;
    dropConnection();
    fail(at + "the server there does not know this job's secret (KILN_STORE_TOKEN); not trusting it");
  }
  if (verdict == 'J') {
    char n[2] = {0, 0};
    std::vector<char> job;
    bool ok = recvAll(fd_, n, 2, deadline) == Io::Ok;
    job.resize(std::min<size_t>(getLe(n, 2), store::kMaxJob));
    ok = ok && recvAll(fd_, job.data(), job.size(), deadline) == Io::Ok;
    dropConnection();
    fail(at + "that store serves job '" + (ok ? std::string(job.begin(), job.end()) : "?") + "', not this rank's '" +
         identity_.job +
         "' (another run on this port? set KILN_JOB_ID alike on every rank)");
  }
  dropConnection();
  if (verdict == 'T')
    fail(at + "rank 0's store refused this rank: KILN_STORE_TOKEN differs (another run on this port, or the "
              "secret was not given alike to every rank)");
  fail(at + "an unexpected answer to the hello");
}

bool TcpStore::request(char op, const std::string& key, const std::vector<char>* value, std::vector<char>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto deadline = Clock::now() + timeout_;
  if (fd_ < 0) connectUntil(deadline);
  const uint64_t vlen = value ? value->size() : 0;
  std::vector<char> msg(store::kRequestHeader + key.size() + vlen);
  msg[0] = op;
  putLe(msg.data() + 1, key.size(), 4);
  putLe(msg.data() + 5, vlen, 8);
  std::memcpy(msg.data() + store::kRequestHeader, key.data(), key.size());
  if (vlen) std::memcpy(msg.data() + store::kRequestHeader + key.size(), value->data(), vlen);

  char status = 0;
  Io io = sendAll(fd_, msg.data(), msg.size(), deadline);
  if (io == Io::Ok) io = recvAll(fd_, &status, 1, deadline);
  if (io == Io::Ok && status == 'E') {
    char reason = 0;
    io = recvAll(fd_, &reason, 1, deadline);
    dropConnection();
    fail("TCP store " + address() + ": rank 0's store refused " + store::describeRefusal(reason, limits_) +
         " (key '" + key.substr(0, 64) + "')");
  }
  const bool found = status == 'Y';
  if (io == Io::Ok && found) {
    char len[8];
    io = recvAll(fd_, len, 8, deadline);
    if (io == Io::Ok) {
      const uint64_t n = getLe(len, 8);
      if (n > limits_.max_value) {  // the server proved the secret, but a length is still checked
        dropConnection();
        fail("TCP store " + address() + ": a reply of " + std::to_string(n) + " bytes, more than any value");
      }
      out->resize(n);
      io = recvAll(fd_, out->data(), out->size(), deadline);
    }
  }
  if (io == Io::Ok && status != 'K' && status != 'N' && status != 'Y') io = Io::Closed;
  if (io != Io::Ok) broken(io);
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
