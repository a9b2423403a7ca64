// The c10d TCPStore client (c10d_store.h). Opcodes, in PyTorch's
// QueryType order:
//
//   torch < 2.2:  SET 0, COMPARE_SET 1, GET 2, ADD 3, CHECK 4, WAIT 5,
//                 GETNUMKEYS 6, WATCH_KEY 7, DELETE_KEY 8, ...
//   torch >= 2.2: VALIDATE 0 (u32 magic 0x3C85F7CE, first on a connection,
//                 no reply), then the same list shifted by one: SET 1,
//                 COMPARE_SET 2, GET 3, ADD 4, CHECK 5, WAIT 6, GETNUMKEYS 7
//
// SET: key, value; no reply. GET: key; reply u64 length + value (the server
// does not wait for a missing key and a 1.13 server drops the connection,
// so a get first WAITs, as PyTorch's own client does). CHECK and WAIT: u64
// count, then the keys; CHECK replies one byte (0 ready, 1 not), WAIT one
// byte (0) once every key is set. GETNUMKEYS: reply i64.
//
// The probe: a throwaway connection sends the single byte 6. A server with
// the old numbering reads GETNUMKEYS and answers 8 bytes; a 2.2+ server
// reads a first byte that is not VALIDATE and closes (the classic server)
// or waits for more (the libuv one): no answer within a second means the
// new numbering.
#include "backend/comm/c10d_store.h"

#include <unistd.h>

#include <cstring>
#include <thread>

#include "backend/comm/socket_io.h"
#include "backend/comm/tcp_store.h"
#include "core/result.h"

namespace kiln {

using std::chrono::milliseconds;

namespace {

constexpr uint32_t kValidateMagic = 0x3C85F7CE;

void putString(std::string& out, const std::string& s) {
  char len[8];
  putLe(len, s.size(), 8);
  out.append(len, 8);
  out.append(s);
}

}  // namespace

C10dStore::C10dStore(std::string host, int port, std::string prefix, milliseconds timeout)
    : host_(normalizeHost(host)), port_(port), prefix_(std::move(prefix)), timeout_(timeout) {
  if (port <= 0 || port > 65535)
    fail("torchrun's store " + address() + ": the port must be in 1..65535 (MASTER_PORT)");
}

C10dStore::~C10dStore() {
  dropConnection();
}

std::string C10dStore::address() const {
  return host_ + ":" + std::to_string(port_);
}

std::string C10dStore::protocolName() const {
  switch (protocol_) {
    case Protocol::Legacy: return "torch < 2.2";
    case Protocol::Validated: return "torch >= 2.2";
    case Protocol::Unknown: break;
  }
  return "not yet known";
}

char C10dStore::opcode(Query q) const {
  static constexpr char kLegacy[] = {0 /*SET*/, 2 /*GET*/, 4 /*CHECK*/, 5 /*WAIT*/, 6 /*GETNUMKEYS*/};
  return static_cast<char>(kLegacy[q] + (protocol_ == Protocol::Validated ? 1 : 0));
}

C10dStore::Protocol C10dStore::probe(Clock::time_point deadline) const {
  const int fd = connectTcp(host_, port_, deadline, "torchrun's store " + address());
  if (fd < 0)
    fail("torchrun's store " + address() + ": no answer within " + formatSeconds(timeout_) +
         " (is the torchrun agent running, and MASTER_ADDR/MASTER_PORT its store?)");
  const char numkeys = 6;
  char reply[8];
  const auto answer_by = std::min(deadline, Clock::now() + std::chrono::seconds(1));
  const bool legacy = sendAll(fd, &numkeys, 1, deadline) == Io::Ok && recvAll(fd, reply, 8, answer_by) == Io::Ok;
  ::close(fd);
  return legacy ? Protocol::Legacy : Protocol::Validated;
}

void C10dStore::connect(Clock::time_point deadline) {
  if (protocol_ == Protocol::Unknown) protocol_ = probe(deadline);
  fd_ = connectTcp(host_, port_, deadline, "torchrun's store " + address());
  if (fd_ < 0)
    fail("torchrun's store " + address() + ": no answer within " + formatSeconds(timeout_) +
         " (is the torchrun agent running?)");
  if (protocol_ == Protocol::Validated) {
    char validate[5];
    validate[0] = 0;
    putLe(validate + 1, kValidateMagic, 4);
    if (sendAll(fd_, validate, sizeof validate, deadline) != Io::Ok) {
      dropConnection();
      fail("torchrun's store " + address() + ": the server closed the connection at the handshake");
    }
  }
}

void C10dStore::dropConnection() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void C10dStore::roundTrip(const std::string& request, char* reply, size_t reply_bytes, Clock::time_point deadline,
                          const std::string& doing) {
  if (fd_ < 0) connect(deadline);
  // One write per request: a 1.13 server reads each client's request to the
  // end before it serves anyone else.
  Io io = sendAll(fd_, request.data(), request.size(), deadline);
  if (io == Io::Ok && reply_bytes) io = recvAll(fd_, reply, reply_bytes, deadline);
  if (io == Io::Ok) return;
  // A timed-out WAIT may still be answered later: never reuse the connection.
  dropConnection();
  if (io == Io::Timeout)
    fail("torchrun's store " + address() + ": " + doing + " took longer than " + formatSeconds(timeout_) +
         " (did every rank start?)");
  fail("torchrun's store " + address() + ": the server closed the connection while " + doing +
       " (did the torchrun agent exit?)");
}

std::string C10dStore::keysRequest(Query q, const std::vector<std::string>& keys) const {
  std::string r(1, opcode(q));
  char count[8];
  putLe(count, keys.size(), 8);
  r.append(count, 8);
  for (const std::string& k : keys) putString(r, prefix_ + k);
  return r;
}

void C10dStore::set(const std::string& key, const std::vector<char>& data) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto deadline = Clock::now() + timeout_;
  if (fd_ < 0) connect(deadline);
  std::string r(1, opcode(kSet));
  putString(r, prefix_ + key);
  putString(r, std::string(data.begin(), data.end()));
  roundTrip(r, nullptr, 0, deadline, "setting '" + key + "'");
}

bool C10dStore::check(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto deadline = Clock::now() + timeout_;
  if (fd_ < 0) connect(deadline);
  char ready = 1;
  roundTrip(keysRequest(kCheck, {key}), &ready, 1, deadline, "checking '" + key + "'");
  return ready == 0;
}

void C10dStore::wait(const std::vector<std::string>& keys, const milliseconds& timeout) {
  if (keys.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  const auto deadline = Clock::now() + timeout;
  if (fd_ < 0) connect(deadline);
  char stop = 1;
  roundTrip(keysRequest(kWait, keys), &stop, 1, deadline, "waiting for '" + keys.front() + "'");
  if (stop != 0) {
    dropConnection();
    fail("torchrun's store " + address() + ": unexpected answer " + std::to_string(int(stop)) +
         " to a wait (a server this client does not know?)");
  }
}

std::vector<char> C10dStore::get(const std::string& key) {
  wait({key}, timeout_);
  std::lock_guard<std::mutex> lock(mu_);
  const auto deadline = Clock::now() + timeout_;
  if (fd_ < 0) connect(deadline);
  std::string r(1, opcode(kGet));
  putString(r, prefix_ + key);
  char len[8];
  roundTrip(r, len, 8, deadline, "reading '" + key + "'");
  const uint64_t n = getLe(len, 8);
  // Rendezvous values are addresses (bytes to kilobytes): a larger length
  // is a server speaking something else.
  if (n > (uint64_t{1} << 28)) {
    dropConnection();
    fail("torchrun's store " + address() + ": '" + key + "' claims " + std::to_string(n) + " bytes");
  }
  std::vector<char> out(n);
  if (n && recvAll(fd_, out.data(), n, deadline) != Io::Ok) {
    dropConnection();
    fail("torchrun's store " + address() + ": the server closed the connection while reading '" + key + "'");
  }
  return out;
}

}  // namespace kiln
