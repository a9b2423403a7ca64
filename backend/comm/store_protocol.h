// The messages of Kiln's rendezvous store (tcp_store.h) and the server's
// side of one connection, without sockets: bytes in, bytes out. The server
// thread drives one StoreSession per client; the fuzzer
// (tests/fuzz/fuzz_store_protocol.cpp) drives it with arbitrary bytes.
//
// Anything that reaches rank 0's port can talk to the store, so a client
// first proves it knows the job's secret (KILN_STORE_TOKEN; the launcher
// makes one per run) without sending it: the server sends a fresh nonce, the
// client answers with an HMAC-SHA256 over both sides' nonces and its job
// name, and the server proves the same back (a rank never trusts addresses
// from a store that does not know the secret). A client of another job, or
// with another secret, is told so and dropped. Bytes are allocated only as
// they arrive, and every length is checked against Limits before anything
// is reserved for it.
//
// Wire format (integers little-endian):
//   greeting  server: "KILNSTOR", version (1 byte), server nonce (32 bytes)
//   hello     client: client nonce (32), job length (u16), job, proof (32)
//             proof = HMAC-SHA256(secret, "kiln-store client" | server nonce | client nonce | job)
//   verdict   server: 'A', HMAC-SHA256(secret, "kiln-store server" | the same) -- accepted
//                     'T' -- another secret;  'J', u16 length, job -- another job (then closes)
//   request   client: op ('S' set, 'G' get), key length (u32), value length (u64, 0 for get), key, value
//   reply     server: 'K' (set) | 'N' (get: not set) | 'Y', u64 length, value (get: found)
//                     | 'E', reason (a Refusal byte), then closes
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

namespace kiln::store {

inline constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'S', 'T', 'O', 'R'};
inline constexpr uint8_t kVersion = 2;
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;
inline constexpr size_t kGreetingBytes = sizeof kMagic + 1 + kNonceBytes;
inline constexpr size_t kMaxJob = 256;
inline constexpr size_t kMaxSecret = 1024;
inline constexpr size_t kRequestHeader = 1 + 4 + 8;
/// consume() stops handling requests once this much reply is waiting.
inline constexpr size_t kMaxPendingReply = size_t{1} << 20;

using Nonce = std::array<unsigned char, kNonceBytes>;
using Mac = std::array<unsigned char, kMacBytes>;

/// What one store holds at most. A rendezvous of 4096 ranks stores a few
/// MB; anything beyond these is a bug or a hostile client.
struct Limits {
  size_t max_key = 4096;
  size_t max_value = size_t{16} << 20;
  /// Stored keys and values plus the requests being received.
  size_t max_total = size_t{256} << 20;
  size_t max_connections = 8192;
  /// A connection that has not proven the secret within this is dropped.
  std::chrono::milliseconds hello_timeout{10000};
};

/// Why the server refused a request ('E' reply); the client names it.
enum class Refusal : char { KeyTooLong = 'k', ValueTooLarge = 'v', StoreFull = 'f', BadRequest = 'r' };
std::string describeRefusal(char reason, const Limits& limits);

/// Bytes from the kernel's random source (getrandom); throws KilnException
/// if it has none.
void randomBytes(void* out, size_t n);
/// A fresh secret for one job: 64 hex digits (256 bits).
std::string newSecret();
/// The HMACs of the hello and of the verdict (see the wire format above).
Mac clientProof(const std::string& secret, const Nonce& server, const Nonce& client, const std::string& job);
Mac serverProof(const std::string& secret, const Nonce& server, const Nonce& client, const std::string& job);
/// Equality that takes the same time wherever the first difference is.
bool sameMac(const Mac& a, const Mac& b);

/// The key-values of one job and the bytes they (and requests being
/// received) take, within Limits::max_total.
class StoreData {
 public:
  explicit StoreData(Limits limits = {}) : limits_(limits) {}
  const Limits& limits() const { return limits_; }
  /// Count `bytes` against max_total; false (nothing counted) if over.
  bool reserve(size_t bytes);
  void release(size_t bytes);
  /// Store key = value, whose bytes were reserved; releases the bytes of the
  /// value it replaces.
  void put(std::string key, std::string value);
  const std::string* find(const std::string& key) const;
  size_t used() const { return used_; }
  size_t keys() const { return data_.size(); }
  /// The bytes of the stored keys and values, counted afresh (used() less
  /// the requests in progress; a check for tests and the fuzzer).
  size_t storedBytes() const;

 private:
  Limits limits_;
  size_t used_ = 0;
  std::map<std::string, std::string> data_;
};

/// The server's side of one connection.
class StoreSession {
 public:
  StoreSession(StoreData& data, std::string secret, std::string job, const Nonce& server_nonce);
  ~StoreSession();  // gives back the reservation of a request cut short
  StoreSession(const StoreSession&) = delete;
  StoreSession& operator=(const StoreSession&) = delete;

  /// The first bytes the server sends.
  std::string greeting() const;
  /// Take `n` bytes from the client (0: go on with those buffered); what
  /// to send back is appended to `out`, at most about kMaxPendingReply, so
  /// call again with n = 0 once it is sent while buffered() > 0. False:
  /// close the connection once `out` is sent (why() says why; later bytes
  /// are ignored).
  bool consume(const char* bytes, size_t n, std::string& out);
  bool authenticated() const { return state_ == State::Ready || state_ == State::Request; }
  bool closing() const { return state_ == State::Closed; }
  const std::string& why() const { return why_; }
  /// Bytes received and not yet handled (a request in progress).
  size_t buffered() const { return in_.size() - pos_; }

 private:
  enum class State { Hello, Ready, Request, Closed };
  bool hello(std::string& out);
  bool request(std::string& out);
  bool refuse(Refusal r, std::string& out, std::string why);
  bool close(std::string why);

  StoreData& data_;
  std::string secret_, job_;
  Nonce server_nonce_;
  State state_ = State::Hello;
  std::string in_;  // received bytes; handled up to pos_
  size_t pos_ = 0;
  // The request being received (State::Request).
  char op_ = 0;
  size_t key_len_ = 0, value_len_ = 0, reserved_ = 0;
  std::string why_;
};

}  // namespace kiln::store
