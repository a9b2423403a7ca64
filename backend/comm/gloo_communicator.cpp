// The Gloo communicator (gloo_communicator.h): rendezvous, the collectives on
// top of Gloo's algorithms (bcube allreduce, ring allgatherv, binomial-tree
// broadcast, barrier) plus a ring reduce-scatter and an all-to-all of our
// own on Gloo's point-to-point buffers, and the translation of Gloo's
// exceptions into lines a user can act on.
#include "backend/comm/gloo_communicator.h"

#include <net/if.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>
#include <type_traits>

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include "backend/comm/c10d_store.h"
#include "backend/comm/tcp_store.h"
#include "core/tensor.h"

namespace kiln {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

// Gloo's slot prefixes are 0x01..0x08 (gloo/types.h); ours must differ so a
// reduce-scatter never matches another collective's messages.
constexpr uint8_t kReduceScatterSlotPrefix = 0x4b;
constexpr uint8_t kAllToAllSlotPrefix = 0x4c;

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

template <typename T>
void sumNative(void* c, const void* a, const void* b, size_t n) {
  // out may alias a (Gloo reduces into its output); elementwise is safe.
  auto* o = static_cast<T*>(c);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  if constexpr (std::is_integral_v<T>) {
    // Wrap on overflow like PyTorch, without signed-overflow UB.
    using U = std::make_unsigned_t<T>;
    for (size_t i = 0; i < n; ++i) o[i] = static_cast<T>(static_cast<U>(x[i]) + static_cast<U>(y[i]));
  } else {
    for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
  }
}

// f16/bf16: add in float and round once per addition, as PyTorch's Gloo
// backend does for Half.
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void sumHalf(void* c, const void* a, const void* b, size_t n) {
  auto* o = static_cast<uint16_t*>(c);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = FromFloat(ToFloat(x[i]) + ToFloat(y[i]));
}

ReduceFn sumFunction(DType t) {
  switch (t) {
    case DType::F32:
      return sumNative<float>;
    case DType::F64:
      return sumNative<double>;
    case DType::I32:
      return sumNative<int32_t>;
    case DType::I64:
      return sumNative<int64_t>;
    case DType::F16:
      return sumHalf<halfToFloat, floatToHalf>;
    case DType::BF16:
      return sumHalf<bf16ToFloat, floatToBf16>;
    default:
      return nullptr;
  }
}

// Gloo's messages carry "[file.cc:123] " prefixes and name sockets, not
// ranks. What a user can act on is whether the others were too slow (or
// never came) or one of them went away.
std::string describeGlooError(std::string msg, milliseconds timeout) {
  auto has = [&](const char* s) { return msg.find(s) != std::string::npos; };
  if (has("Timed out") || has("timeout") || has("Timeout"))
    return "timed out after " + formatSeconds(timeout) + " waiting for the other ranks";
  if (has("closed") || has("Read error") || has("Write error") || has("reset") || has("Broken pipe") || has("refused"))
    return "a peer closed its connection (did a rank die or fail?)";
  while (!msg.empty() && msg[0] == '[' && msg.find("] ") != std::string::npos) msg.erase(0, msg.find("] ") + 2);
  std::replace(msg.begin(), msg.end(), '\n', ' ');
  return "gloo: " + msg;
}

// The local address the other ranks can reach us on: loopback for local
// runs, else the interface the route to master_addr leaves through (a UDP
// connect sends nothing; it only picks the route). Never the machine's
// hostname, which need not resolve.
std::string localAddressFor(const std::string& master, int port) {
  if (master.empty() || master == "localhost" || master.rfind("127.", 0) == 0) return "127.0.0.1";
  if (master == "::1") return master;
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* list = nullptr;
  std::string out = master;
  if (::getaddrinfo(master.c_str(), std::to_string(port > 0 ? port : 9).c_str(), &hints, &list) != 0) return out;
  for (addrinfo* a = list; a; a = a->ai_next) {
    const int s = ::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    char host[NI_MAXHOST];
    const bool ok =
        ::connect(s, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(s, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        ::getnameinfo(reinterpret_cast<sockaddr*>(&local), len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) == 0;
    ::close(s);
    if (ok) {
      out = host;
      break;
    }
  }
  ::freeaddrinfo(list);
  return out;
}

// Gloo's FileStore, with a wait that honours milliseconds: the original
// compares whole elapsed seconds with the timeout, so a 2 s timeout waits 3 s
// and its get() waits a fixed 30 s.
class DirStore final : public gloo::rendezvous::FileStore {
 public:
  DirStore(const std::string& dir, milliseconds timeout) : FileStore(dir), dir_(dir), timeout_(timeout) {}
  bool has(const std::string& key) { return check({key}); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    const auto deadline = Clock::now() + timeout;
    while (!check(keys)) {
      if (Clock::now() >= deadline)
        fail("file store " + dir_ + ": a key was not set within " + formatSeconds(timeout) +
             " (did every rank start?)");
      std::this_thread::sleep_for(milliseconds(5));
    }
  }
  /// Remove the files this rank wrote, so the directory serves the next run
  /// (Gloo's set() refuses a key that exists).
  void removeOwnKeys() {
    for (const auto& path : getAllKeyFilePaths()) std::remove(path.c_str());
  }

 private:
  std::string dir_;
  milliseconds timeout_;
};

std::string arrivedKey(int rank) {
  return "kiln/arrived/" + std::to_string(rank);
}

}  // namespace

GlooCommunicator::GlooCommunicator(const CommOptions& options) : options_(options) {
  const auto& o = options_;
  if (o.world_size < 1) fail("gloo communicator: world size " + std::to_string(o.world_size) + " must be at least 1");
  if (o.rank < 0 || o.rank >= o.world_size)
    fail("gloo communicator: rank " + std::to_string(o.rank) + " is not in 0.." + std::to_string(o.world_size - 1));
  if (o.timeout.count() <= 0) fail("gloo communicator: the timeout must be positive");
  if (o.world_size == 1) return;  // nothing to meet; collectives are local
  // Gloo writes to sockets with writev, which raises SIGPIPE when a peer has
  // died; that would kill this process instead of failing the collective.
  struct sigaction old {};
  if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
  try {
    rendezvous();
  } catch (const KilnException& e) {
    fail(where("rendezvous") + ": " + e.what());
  } catch (const std::exception& e) {
    fail(where("rendezvous") + ": " + describeGlooError(e.what(), o.rendezvous_timeout));
  }
}

GlooCommunicator::~GlooCommunicator() = default;

void GlooCommunicator::rendezvous() {
  const auto& o = options_;
  const auto deadline = Clock::now() + o.rendezvous_timeout;
  std::unique_ptr<gloo::rendezvous::Store> store;
  DirStore* dir = nullptr;
  TcpStore* tcp = nullptr;
  C10dStore* agent = nullptr;
  std::string storeName;
  if (o.agent_store) {  // torchrun's agent serves a c10d store on MASTER_PORT: every rank is its client
    auto a = std::make_unique<C10dStore>(o.master_addr, o.master_port, agentStorePrefix(o), o.rendezvous_timeout);
    agent = a.get();
    storeName = "torchrun's store " + a->address();
    store = std::move(a);
  } else if (!o.store_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.store_dir, ec);
    if (!std::filesystem::is_directory(o.store_dir))
      fail("file store " + o.store_dir + ": cannot create the directory (" + ec.message() + ")");
    auto d = std::make_unique<DirStore>(o.store_dir, o.rendezvous_timeout);
    dir = d.get();
    store = std::move(d);
    storeName = "file store " + o.store_dir;
  } else {
    auto t = std::make_unique<TcpStore>(o.master_addr, o.master_port, o.rank == 0, o.rendezvous_timeout,
                                        StoreIdentity{o.store_secret, o.run_id});
    if (o.rank == 0 && o.store_secret.empty())
      std::fprintf(stderr,
                   "kiln: warning: KILN_STORE_TOKEN is not set: the TCP store on %s lets any client that reaches "
                   "its port join this run (give every rank the same secret; kiln train --nproc does)\n",
                   t->address().c_str());
    tcp = t.get();
    storeName = "TCP store " + t->address();
    store = std::move(t);
  }
  auto has = [&](const std::string& key) {
    return dir ? dir->has(key) : agent ? agent->check(key) : tcp->check(key);
  };

  // Arrive first, so that a missing rank is named rather than surfacing as
  // a timeout deep inside Gloo's connect.
  if (dir && has(arrivedKey(o.rank)))
    fail(storeName + ": rank " + std::to_string(o.rank) +
         "'s key is already there: a previous run left its files (use an empty directory)");
  store->set(arrivedKey(o.rank), {'1'});
  std::vector<int> missing;
  for (int r = 0; r < o.world_size; ++r)
    if (r != o.rank) missing.push_back(r);
  for (;;) {
    missing.erase(std::remove_if(missing.begin(), missing.end(), [&](int r) { return has(arrivedKey(r)); }),
                  missing.end());
    if (missing.empty()) break;
    if (Clock::now() >= deadline) {
      std::string who = missing.size() == 1 ? "rank " : "ranks ";
      for (size_t i = 0; i < missing.size(); ++i) who += (i ? ", " : "") + std::to_string(missing[i]);
      fail(who + " did not arrive within " + formatSeconds(o.rendezvous_timeout) + " (" + storeName + ")");
    }
    std::this_thread::sleep_for(milliseconds(10));
  }

  gloo::transport::tcp::attr attr;
  if (!o.socket_ifname.empty()) {  // KILN_SOCKET_IFNAME: that interface's address
    if (::if_nametoindex(o.socket_ifname.c_str()) == 0)
      fail("KILN_SOCKET_IFNAME=" + o.socket_ifname + ": no such network interface on this machine");
    attr.iface = o.socket_ifname;
  } else {
    attr.hostname = localAddressFor(o.master_addr, o.master_port);
  }
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto context = std::make_shared<gloo::rendezvous::Context>(o.rank, o.world_size);
  context->setTimeout(o.rendezvous_timeout);  // before connecting: the pairs take it then
  gloo::rendezvous::PrefixStore prefixed("kiln/gloo", *store);
  context->connectFullMesh(prefixed, device);
  context_ = context;

  // Once every rank is through this barrier, every rank is done with the
  // store: rank 0 may stop serving it and the file store's keys may go.
  gloo::BarrierOptions b(context_);
  b.setTag(0);
  b.setTimeout(o.rendezvous_timeout);
  gloo::barrier(b);
  if (dir) dir->removeOwnKeys();
  // From here on, a collective's options take the collective timeout.
  context_->setTimeout(o.timeout);
}

std::string GlooCommunicator::where(const char* what) const {
  return std::string(what) + " (rank " + std::to_string(options_.rank) + " of " + std::to_string(options_.world_size) +
         ")";
}

template <typename Fn>
void GlooCommunicator::guarded(const char* what, Fn&& fn) {
  guarded(what, options_.timeout, std::forward<Fn>(fn));
}

template <typename Fn>
void GlooCommunicator::guarded(const char* what, milliseconds timeout, Fn&& fn) {
  if (!broken_.empty()) fail(broken_);
  try {
    fn();
    return;
  } catch (const std::exception& e) {
    broken_ = where(what) + ": " + describeGlooError(e.what(), timeout);
  }
  // Close every connection: the peers blocked on this rank then fail at once
  // instead of waiting out their own timeout.
  try {
    if (context_) context_->closeConnections();
  } catch (...) {
  }
  fail(broken_);
}

void GlooCommunicator::checkCounts(const char* what, const std::vector<size_t>& counts) const {
  if (counts.size() != static_cast<size_t>(size()))
    fail(where(what) + ": " + std::to_string(counts.size()) + " counts for " + std::to_string(size()) + " ranks");
}

void GlooCommunicator::allreduceSum(void* data, size_t count, DType dtype) {
  const ReduceFn sum = sumFunction(dtype);
  if (!sum)
    fail(where("allreduce") + ": dtype " + std::string(dtypeName(dtype)) +
         " is not supported (f32, f64, f16, bf16, i32, i64)");
  const uint32_t tag = nextTag();
  guarded("allreduce", [&] {
    if (!context_ || count == 0) return;
    gloo::AllreduceOptions opts(context_);
    // The element size decides Gloo's segment boundaries; the type itself
    // only matters to `sum`.
    switch (dtypeSize(dtype)) {
      case 2:
        opts.setOutput(static_cast<uint16_t*>(data), count);
        break;
      case 4:
        opts.setOutput(static_cast<uint32_t*>(data), count);
        break;
      default:
        opts.setOutput(static_cast<uint64_t*>(data), count);
        break;
    }
    opts.setReduceFunction(sum);
    opts.setTag(tag);
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::BCUBE);
    gloo::allreduce(opts);
  });
}

void GlooCommunicator::reduceScatterSum(void* data, const std::vector<size_t>& counts, DType dtype) {
  checkCounts("reduce-scatter", counts);
  const ReduceFn sum = sumFunction(dtype);
  if (!sum)
    fail(where("reduce-scatter") + ": dtype " + std::string(dtypeName(dtype)) +
         " is not supported (f32, f64, f16, bf16, i32, i64)");
  const uint32_t tag = nextTag();
  guarded("reduce-scatter", [&] {
    const size_t n = static_cast<size_t>(size()), r = static_cast<size_t>(rank()), es = dtypeSize(dtype);
    std::vector<size_t> offset(n);
    size_t total = 0, largest = 0;
    for (size_t i = 0; i < n; ++i) {
      offset[i] = total;
      total += counts[i];
      largest = std::max(largest, counts[i]);
    }
    if (!context_ || total == 0) return;
    // Ring: at step s rank r passes chunk r-s-1 (its running sum of that
    // chunk) to r+1 and adds chunk r-s-2 from r-1 into its own copy. After
    // N-1 steps the chunk that arrives last, chunk r, holds every rank's
    // contribution. Empty chunks are skipped on both sides alike.
    std::vector<char> scratch(largest * es);
    auto buf = context_->createUnboundBuffer(data, total * es);
    auto tmp = context_->createUnboundBuffer(scratch.data(), scratch.size());
    const auto slot = gloo::Slot::build(kReduceScatterSlotPrefix, tag);
    const int next = static_cast<int>((r + 1) % n), prev = static_cast<int>((r + n - 1) % n);
    for (size_t s = 0; s + 1 < n; ++s) {
      const size_t out = (r + 2 * n - s - 1) % n, in = (r + 2 * n - s - 2) % n;
      if (counts[in]) tmp->recv(prev, slot, 0, counts[in] * es);
      if (counts[out]) buf->send(next, slot, offset[out] * es, counts[out] * es);
      if (counts[in]) {
        tmp->waitRecv(options_.timeout);
        char* mine = static_cast<char*>(data) + offset[in] * es;
        sum(mine, mine, scratch.data(), counts[in]);
      }
      if (counts[out]) buf->waitSend(options_.timeout);
    }
  });
}

void GlooCommunicator::allGather(void* data, const std::vector<size_t>& counts, DType dtype) {
  checkCounts("all-gather", counts);
  const uint32_t tag = nextTag();
  guarded("all-gather", [&] {
    const size_t es = dtypeSize(dtype);
    std::vector<size_t> bytes;
    size_t total = 0;
    for (size_t c : counts) {
      bytes.push_back(c * es);
      total += c * es;
    }
    if (!context_ || total == 0) return;
    // No input buffer: Gloo's allgatherv then works in place, sending this
    // rank's slice of the output.
    gloo::AllgathervOptions opts(context_);
    opts.setOutput(static_cast<uint8_t*>(data), bytes);
    opts.setTag(tag);
    gloo::allgatherv(opts);
  });
}

void GlooCommunicator::allToAll(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                const std::vector<size_t>& recv_counts, DType dtype) {
  checkCounts("all-to-all", send_counts);
  checkCounts("all-to-all", recv_counts);
  const size_t n = static_cast<size_t>(size()), r = static_cast<size_t>(rank()), es = dtypeSize(dtype);
  if (send_counts[r] != recv_counts[r])
    fail(where("all-to-all") + ": sends itself " + std::to_string(send_counts[r]) + " elements but expects " +
         std::to_string(recv_counts[r]));
  const uint32_t tag = nextTag();
  guarded("all-to-all", [&] {
    std::vector<size_t> send_off(n + 1, 0), recv_off(n + 1, 0);
    for (size_t q = 0; q < n; ++q) {
      send_off[q + 1] = send_off[q] + send_counts[q] * es;
      recv_off[q + 1] = recv_off[q] + recv_counts[q] * es;
    }
    const size_t self = send_counts[r] * es;
    if (self) std::memcpy(static_cast<char*>(recv) + recv_off[r], static_cast<const char*>(send) + send_off[r], self);
    if (!context_) return;
    // Gloo's buffers take a non-const pointer but only read what they send.
    std::unique_ptr<gloo::transport::UnboundBuffer> out, in;
    if (send_off[n] > self) out = context_->createUnboundBuffer(const_cast<void*>(send), send_off[n]);
    if (recv_off[n] > self) in = context_->createUnboundBuffer(recv, recv_off[n]);
    const auto slot = gloo::Slot::build(kAllToAllSlotPrefix, tag);
    // Staggered (r+i, r-i) like gloo::alltoallv, so the ranks do not all
    // start on the same peer. One message per pair: one slot serves them all.
    size_t sends = 0, recvs = 0;
    for (size_t i = 1; i < n; ++i) {
      const size_t to = (r + i) % n, from = (r + n - i) % n;
      if (send_counts[to]) {
        out->send(static_cast<int>(to), slot, send_off[to], send_counts[to] * es);
        ++sends;
      }
      if (recv_counts[from]) {
        in->recv(static_cast<int>(from), slot, recv_off[from], recv_counts[from] * es);
        ++recvs;
      }
    }
    for (; recvs > 0; --recvs) in->waitRecv(options_.timeout);
    for (; sends > 0; --sends) out->waitSend(options_.timeout);
  });
}

void GlooCommunicator::broadcast(void* data, size_t bytes, int root) {
  if (root < 0 || root >= size())
    fail(where("broadcast") + ": root " + std::to_string(root) + " is not a rank (0.." + std::to_string(size() - 1) +
         ")");
  const uint32_t tag = nextTag();
  guarded("broadcast", [&] {
    if (!context_ || bytes == 0) return;
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(static_cast<uint8_t*>(data), bytes);  // in place on the root too
    opts.setRoot(root);
    opts.setTag(tag);
    gloo::broadcast(opts);
  });
}

void GlooCommunicator::barrier() {
  barrier(options_.timeout);
}

void GlooCommunicator::barrier(milliseconds timeout) {
  const uint32_t tag = nextTag();
  guarded("barrier", timeout, [&] {
    if (!context_) return;
    gloo::BarrierOptions opts(context_);
    opts.setTag(tag);
    opts.setTimeout(timeout);
    gloo::barrier(opts);
  });
}

Result<std::unique_ptr<Communicator>> createGlooCommunicator(const CommOptions& options) {
  return catchErrors([&]() -> std::unique_ptr<Communicator> { return std::make_unique<GlooCommunicator>(options); });
}

}  // namespace kiln
