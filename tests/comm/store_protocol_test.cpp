// The hardened rendezvous store: its protocol on its own (StoreSession fed
// bytes, no sockets) and the TCP store's server facing clients that do not
// know the secret, belong to another job, break the limits, stall mid-request
// or come by the hundred.
#include "backend/comm/store_protocol.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backend/comm/socket_io.h"
#include "backend/comm/tcp_store.h"
#include "core/result.h"
#include "tests/comm/gloo_test_helpers.h"

namespace kiln {
namespace {

using namespace std::chrono_literals;
using store::Nonce;
using store::StoreData;
using store::StoreSession;
using testing::freePort;

const std::string kSecret = "0123456789abcdef";

Nonce nonceOf(unsigned char fill) {
  Nonce n{};
  n.fill(fill);
  return n;
}

std::string hello(const std::string& secret, const std::string& job, const Nonce& server, const Nonce& client) {
  const store::Mac mac = store::clientProof(secret, server, client, job);
  std::string h(reinterpret_cast<const char*>(client.data()), client.size());
  char len[2];
  putLe(len, job.size(), 2);
  h.append(len, 2);
  h += job;
  h.append(reinterpret_cast<const char*>(mac.data()), mac.size());
  return h;
}

std::string header(char op, uint64_t key_len, uint64_t value_len) {
  char h[store::kRequestHeader];
  h[0] = op;
  putLe(h + 1, key_len, 4);
  putLe(h + 5, value_len, 8);
  return std::string(h, sizeof h);
}

std::string setRequest(const std::string& key, const std::string& value) {
  return header('S', key.size(), value.size()) + key + value;
}

std::string getRequest(const std::string& key) {
  return header('G', key.size(), 0) + key;
}

// A session past its hello.
struct Authenticated {
  StoreData data;
  StoreSession session;
  explicit Authenticated(store::Limits limits = {})
      : data(limits), session(data, kSecret, "job", nonceOf(1)) {
    std::string out;
    EXPECT_TRUE(session.consume(nullptr, 0, out));
    const std::string h = hello(kSecret, "job", nonceOf(1), nonceOf(2));
    EXPECT_TRUE(session.consume(h.data(), h.size(), out));
    EXPECT_TRUE(session.authenticated());
  }
  std::string feed(const std::string& bytes, bool* open = nullptr) {
    std::string out;
    const bool ok = session.consume(bytes.data(), bytes.size(), out);
    if (open) *open = ok;
    return out;
  }
};

TEST(StoreProtocol, TheHelloProvesTheSecretBothWays) {
  StoreData data;
  StoreSession s(data, kSecret, "job", nonceOf(1));
  const std::string g = s.greeting();
  ASSERT_EQ(g.size(), store::kGreetingBytes);
  EXPECT_EQ(g.substr(0, 8), "KILNSTOR");
  const std::string h = hello(kSecret, "job", nonceOf(1), nonceOf(2));
  std::string out;
  // Byte by byte: a hello split anywhere is still one hello.
  for (char c : h) ASSERT_TRUE(s.consume(&c, 1, out));
  ASSERT_TRUE(s.authenticated());
  ASSERT_EQ(out.size(), 1 + store::kMacBytes);
  EXPECT_EQ(out[0], 'A');
  store::Mac theirs{};
  std::memcpy(theirs.data(), out.data() + 1, theirs.size());
  EXPECT_TRUE(store::sameMac(theirs, store::serverProof(kSecret, nonceOf(1), nonceOf(2), "job")));
  // The secret itself never crosses the wire.
  EXPECT_EQ(h.find(kSecret), std::string::npos);
  EXPECT_EQ(out.find(kSecret), std::string::npos);
}

TEST(StoreProtocol, AnotherSecretOrJobIsRefusedAndLearnsNothing) {
  StoreData data;
  {
    StoreSession s(data, kSecret, "job", nonceOf(1));
    const std::string h = hello("another secret", "job", nonceOf(1), nonceOf(2));
    std::string out;
    EXPECT_FALSE(s.consume(h.data(), h.size(), out));
    EXPECT_EQ(out, "T");  // not even the job's name
    EXPECT_NE(s.why().find("does not know this job's secret"), std::string::npos) << s.why();
    // Requests after a refusal are not served.
    const std::string set = setRequest("k", "v");
    EXPECT_FALSE(s.consume(set.data(), set.size(), out));
  }
  {
    StoreSession s(data, kSecret, "job", nonceOf(1));
    const std::string h = hello(kSecret, "other", nonceOf(1), nonceOf(2));
    std::string out;
    EXPECT_FALSE(s.consume(h.data(), h.size(), out));
    EXPECT_EQ(out, std::string("J\3\0job", 6));
  }
  {  // a proof replayed against another server nonce
    StoreSession s(data, kSecret, "job", nonceOf(3));
    const std::string h = hello(kSecret, "job", nonceOf(1), nonceOf(2));
    std::string out;
    EXPECT_FALSE(s.consume(h.data(), h.size(), out));
    EXPECT_EQ(out, "T");
  }
  {  // requests before the hello are read as a hello, and refused
    StoreSession s(data, kSecret, "job", nonceOf(1));
    std::string req = setRequest("k", std::string(200, 'v'));
    std::string out;
    EXPECT_FALSE(s.consume(req.data(), req.size(), out));
  }
  EXPECT_EQ(data.keys(), 0u);
  EXPECT_EQ(data.used(), 0u);
}

TEST(StoreProtocol, SetAndGetInAnySplit) {
  Authenticated a;
  const std::string value("a\0b", 3);
  const std::string both = setRequest("key", value) + getRequest("key") + getRequest("missing");
  std::string out;
  for (char c : both) ASSERT_TRUE(a.session.consume(&c, 1, out));
  EXPECT_EQ(out, std::string("KY\3\0\0\0\0\0\0\0a\0bN", 14));
  EXPECT_EQ(a.data.used(), 3u + 3u);
  a.feed(setRequest("key", "longer value"));  // a replaced value gives its bytes back
  EXPECT_EQ(a.data.used(), 3u + 12u);
}

TEST(StoreProtocol, BytesAreAllocatedOnlyAsTheyArrive) {
  Authenticated a;
  // A header that declares a 16 MiB value and sends 10 bytes of it: the
  // session holds 10 bytes, the store counts 16 MiB against its total.
  const std::string part = header('S', 1, a.data.limits().max_value) + "k" + std::string(10, 'v');
  bool open = false;
  EXPECT_EQ(a.feed(part, &open), "");
  EXPECT_TRUE(open);
  EXPECT_EQ(a.session.buffered(), 11u);
  EXPECT_EQ(a.data.used(), 1 + a.data.limits().max_value);
}

TEST(StoreProtocol, LimitsAreRefusalsThatNameThemselves) {
  store::Limits lim;
  lim.max_key = 8;
  lim.max_value = 100;
  lim.max_total = 150;
  for (const auto& [request, reason] : std::vector<std::pair<std::string, char>>{
           {header('S', 9, 0), 'k'},
           {header('S', 1, 101), 'v'},
           {header('S', 0xffffffffu, 0), 'k'},
           {header('S', 1, ~uint64_t{0}), 'v'},
           {header('X', 1, 0), 'r'},
           {header('G', 1, 5), 'r'}}) {
    Authenticated a(lim);
    bool open = true;
    EXPECT_EQ(a.feed(request, &open), std::string("E") + reason);
    EXPECT_FALSE(open);
    EXPECT_EQ(a.data.used(), 0u);
  }
  Authenticated a(lim);
  EXPECT_EQ(a.feed(setRequest("a", std::string(100, 'x'))), "K");
  bool open = true;
  EXPECT_EQ(a.feed(header('S', 1, 60), &open), "Ef");  // 101 + 61 > 150
  EXPECT_FALSE(open);
  EXPECT_EQ(store::describeRefusal('f', lim), "the store is full (150 bytes)");
}

TEST(StoreProtocol, ACutRequestGivesItsReservationBack) {
  StoreData data;
  {
    StoreSession s(data, kSecret, "job", nonceOf(1));
    std::string out;
    const std::string h = hello(kSecret, "job", nonceOf(1), nonceOf(2)) + header('S', 1, 1000) + "k";
    ASSERT_TRUE(s.consume(h.data(), h.size(), out));
    EXPECT_EQ(data.used(), 1001u);
  }
  EXPECT_EQ(data.used(), 0u);
}

TEST(StoreProtocol, AClientThatDoesNotReadGetsItsRepliesInInstalments) {
  Authenticated a;
  a.feed(setRequest("big", std::string(600 << 10, 'x')));
  std::string many;
  for (int i = 0; i < 8; ++i) many += getRequest("big");
  std::string out = a.feed(many);
  EXPECT_LE(out.size(), store::kMaxPendingReply + (700u << 10));
  EXPECT_GT(a.session.buffered(), 0u);
  size_t total = out.size();
  while (a.session.buffered() > 0) {
    out.clear();
    ASSERT_TRUE(a.session.consume(nullptr, 0, out));
    ASSERT_FALSE(out.empty());
    total += out.size();
  }
  EXPECT_EQ(total, 8 * (9 + (600u << 10)));
}

// ---- the TCP store's server ----------------------------------------------------

int rawConnect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) ADD_FAILURE() << "connect";
  return fd;
}

// Everything the server sends until it closes (or 2 s pass).
std::string readUntilClosed(int fd) {
  std::string all;
  const auto deadline = SocketClock::now() + 2s;
  char buf[256];
  for (;;) {
    if (waitFd(fd, POLLIN, deadline) != Io::Ok) return all + "<open>";
    const ssize_t k = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (k <= 0) return all;
    all.append(buf, static_cast<size_t>(k));
  }
}

TEST(HardenedTcpStore, OnlyClientsOfTheJobWithTheSecretGetIn) {
  const int port = freePort();
  TcpStore server("127.0.0.1", port, true, 5s, {kSecret, "job"});
  server.set("addr/0", {'o', 'k'});
  auto refused = [&](const StoreIdentity& id) {
    try {
      TcpStore client("127.0.0.1", port, false, 2s, id);
      client.set("addr/0", {'e', 'v', 'i', 'l'});
      return std::string("accepted");
    } catch (const KilnException& e) {
      return std::string(e.what());
    }
  };
  EXPECT_NE(refused({"wrong", "job"}).find("rank 0's store refused this rank: KILN_STORE_TOKEN differs"),
            std::string::npos);
  EXPECT_NE(refused({"", "job"}).find("KILN_STORE_TOKEN differs"), std::string::npos);
  EXPECT_NE(refused({kSecret, "other"}).find("that store serves job 'job', not this rank's 'other'"),
            std::string::npos);
  // A client of the old protocol, or of none, sends a request at once: it
  // is read as a hello and refused, and changes nothing.
  const int fd = rawConnect(port);
  const std::string req = setRequest("addr/0", std::string(40, 'x'));
  ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  const std::string answer = readUntilClosed(fd);
  ::close(fd);
  EXPECT_EQ(answer.substr(0, 8), "KILNSTOR");
  // Its "job name" is too long to be one, or its "proof" wrong.
  EXPECT_TRUE(answer.substr(store::kGreetingBytes) == "" || answer.substr(store::kGreetingBytes) == "T") << answer;
  EXPECT_EQ(server.get("addr/0"), (std::vector<char>{'o', 'k'}));
}

TEST(HardenedTcpStore, AClientDoesNotTrustAServerWithoutTheSecret) {
  const int port = freePort();
  TcpStore server("127.0.0.1", port, true, 5s, {"", "job"});  // knows no secret
  try {
    TcpStore client("127.0.0.1", port, false, 2s, {kSecret, "job"});
    client.check("k");
    ADD_FAILURE() << "a store without the secret was trusted";
  } catch (const KilnException& e) {
    // It cannot check the client's proof either: the client hears 'T'.
    EXPECT_NE(std::string(e.what()).find("KILN_STORE_TOKEN differs"), std::string::npos) << e.what();
  }
}

TEST(HardenedTcpStore, SomethingElseOnThePortIsNamed) {
  const int port = freePort();
  const int ls = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  ASSERT_EQ(::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(ls, 4), 0);
  std::thread other([&] {
    const int c = ::accept(ls, nullptr, nullptr);
    const char banner[] = "SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n\r\n\r\n\r\n";
    ::send(c, banner, sizeof banner, MSG_NOSIGNAL);
    std::this_thread::sleep_for(200ms);
    ::close(c);
  });
  try {
    TcpStore client("127.0.0.1", port, false, 2s, {kSecret, "job"});
    client.check("k");
    ADD_FAILURE() << "an SSH server was taken for a store";
  } catch (const KilnException& e) {
    EXPECT_NE(std::string(e.what()).find("is not a Kiln"), std::string::npos) << e.what();
  }
  other.join();
  ::close(ls);
}

TEST(HardenedTcpStore, AStalledClientDoesNotHoldUpTheOthers) {
  const int port = freePort();
  TcpStore server("127.0.0.1", port, true, 5s, {kSecret, "job"});
  TcpStore first("127.0.0.1", port, false, 5s, {kSecret, "job"});
  first.set("warm", {'1'});
  // Half a hello, then silence: the server must go on serving the others.
  const int stalled = rawConnect(port);
  ::send(stalled, "0123456789", 10, MSG_NOSIGNAL);
  std::this_thread::sleep_for(50ms);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) {
    TcpStore c("127.0.0.1", port, false, 5s, {kSecret, "job"});
    c.set("k" + std::to_string(i), {'v'});
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  ::close(stalled);
}

TEST(HardenedTcpStore, AClientWithoutAHelloIsDroppedInTime) {
  const int port = freePort();
  store::Limits lim;
  lim.hello_timeout = 200ms;
  TcpStore server("127.0.0.1", port, true, 5s, {kSecret, "job"}, lim);
  const int fd = rawConnect(port);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string answer = readUntilClosed(fd);
  ::close(fd);
  EXPECT_EQ(answer.size(), store::kGreetingBytes);  // the greeting, then the close
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1500ms);
}

TEST(HardenedTcpStore, ManyClientsAtOnceAndAConnectionCap) {
  const int port = freePort();
  store::Limits lim;
  lim.max_connections = 300;
  TcpStore server("127.0.0.1", port, true, 10s, {kSecret, "job"}, lim);
  constexpr int kClients = 256;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i)
    threads.emplace_back([&, i] {
      try {
        TcpStore c("127.0.0.1", port, false, 10s, {kSecret, "job"});
        c.set("rank/" + std::to_string(i), std::vector<char>(100, static_cast<char>(i)));
        const auto peer = c.get("rank/" + std::to_string((i + 1) % kClients));
        if (peer == std::vector<char>(100, static_cast<char>((i + 1) % kClients))) ++ok;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "client " << i << ": " << e.what();
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kClients);

  // Beyond the cap, a client waits in the kernel's queue until one leaves.
  lim.max_connections = 2;
  const int port2 = freePort();
  TcpStore capped("127.0.0.1", port2, true, 5s, {kSecret, "job"}, lim);
  auto a = std::make_unique<TcpStore>("127.0.0.1", port2, false, 5s, StoreIdentity{kSecret, "job"});
  TcpStore b("127.0.0.1", port2, false, 5s, {kSecret, "job"});
  a->set("a", {'1'});
  b.set("b", {'1'});
  std::atomic<bool> third_done{false};
  std::thread third([&] {
    TcpStore c("127.0.0.1", port2, false, 5s, {kSecret, "job"});
    c.set("c", {'1'});
    third_done = true;
  });
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(third_done.load());
  a.reset();  // a leaves: the third gets its place
  third.join();
  EXPECT_TRUE(third_done.load());
}

TEST(HardenedTcpStore, AValueOverTheLimitIsOneClearLine) {
  const int port = freePort();
  store::Limits lim;
  lim.max_value = 1 << 20;
  TcpStore server("127.0.0.1", port, true, 5s, {kSecret, "job"}, lim);
  TcpStore c("127.0.0.1", port, false, 5s, {kSecret, "job"}, lim);
  try {
    c.set("huge", std::vector<char>((1 << 20) + 1));
    ADD_FAILURE() << "an oversized value was stored";
  } catch (const KilnException& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0's store refused a value larger than 1 MiB (key 'huge')"),
              std::string::npos)
        << e.what();
  }
  c.set("small", {'1'});  // the client reconnects; the store goes on
  EXPECT_TRUE(server.check("small"));
}

}  // namespace
}  // namespace kiln
