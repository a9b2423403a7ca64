// The rendezvous store's messages and the server's side of a connection
// (store_protocol.h). Pure: no sockets, no threads, no clock.
#include "backend/comm/store_protocol.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "backend/comm/socket_io.h"
#include "core/result.h"

namespace kiln::store {

namespace {

std::string megabytes(size_t bytes) {
  if (bytes % (size_t{1} << 20) != 0) return std::to_string(bytes) + " bytes";
  return std::to_string(bytes >> 20) + " MiB";
}

Mac proof(const char* label, const std::string& secret, const Nonce& server, const Nonce& client,
          const std::string& job) {
  std::string msg = label;
  msg.append(reinterpret_cast<const char*>(server.data()), server.size());
  msg.append(reinterpret_cast<const char*>(client.data()), client.size());
  msg += job;
  Mac mac{};
  unsigned int len = 0;
  // An empty secret (a run without KILN_STORE_TOKEN) still needs a key
  // pointer: HMAC treats nullptr as "reuse the last key".
  static const unsigned char kNoKey = 0;
  const void* key = secret.empty() ? static_cast<const void*>(&kNoKey) : secret.data();
  if (!HMAC(EVP_sha256(), key, static_cast<int>(secret.size()), reinterpret_cast<const unsigned char*>(msg.data()),
            msg.size(), mac.data(), &len) ||
      len != mac.size())
    fail("TCP store: HMAC-SHA256 failed (OpenSSL)");
  return mac;
}

}  // namespace

std::string describeRefusal(char reason, const Limits& limits) {
  switch (static_cast<Refusal>(reason)) {
    case Refusal::KeyTooLong:
      return "a key longer than " + std::to_string(limits.max_key) + " bytes";
    case Refusal::ValueTooLarge:
      return "a value larger than " + megabytes(limits.max_value);
    case Refusal::StoreFull:
      return "the store is full (" + megabytes(limits.max_total) + ")";
    case Refusal::BadRequest:
      return "a malformed request";
  }
  return "an unknown reason";
}

void randomBytes(void* out, size_t n) {
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t k = ::getrandom(p, n, 0);
    if (k < 0) {
      if (errno == EINTR) continue;
      fail(std::string("no random bytes from the kernel (getrandom: ") + std::strerror(errno) + ")");
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
}

std::string newSecret() {
  unsigned char raw[32];
  randomBytes(raw, sizeof raw);
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (const unsigned char c : raw) {
    s += kHex[c >> 4];
    s += kHex[c & 15];
  }
  return s;
}

Mac clientProof(const std::string& secret, const Nonce& server, const Nonce& client, const std::string& job) {
  return proof("kiln-store client", secret, server, client, job);
}

Mac serverProof(const std::string& secret, const Nonce& server, const Nonce& client, const std::string& job) {
  return proof("kiln-store server", secret, server, client, job);
}

bool sameMac(const Mac& a, const Mac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

// ---- StoreData ----------------------------------------------------------------

bool StoreData::reserve(size_t bytes) {
  if (bytes > limits_.max_total - used_) return false;  // used_ <= max_total always
  used_ += bytes;
  return true;
}

void StoreData::release(size_t bytes) {
  used_ -= std::min(bytes, used_);
}

void StoreData::put(std::string key, std::string value) {
  const auto it = data_.find(key);
  if (it != data_.end()) {
    release(it->first.size() + it->second.size());
    it->second = std::move(value);
  } else {
    data_.emplace(std::move(key), std::move(value));
  }
}

size_t StoreData::storedBytes() const {
  size_t n = 0;
  for (const auto& [k, v] : data_) n += k.size() + v.size();
  return n;
}

const std::string* StoreData::find(const std::string& key) const {
  const auto it = data_.find(key);
  return it == data_.end() ? nullptr : &it->second;
}

// ---- StoreSession ---------------------------------------------------------------

StoreSession::StoreSession(StoreData& data, std::string secret, std::string job, const Nonce& server_nonce)
    : data_(data), secret_(std::move(secret)), job_(std::move(job)), server_nonce_(server_nonce) {}

StoreSession::~StoreSession() {
  data_.release(reserved_);
}

std::string StoreSession::greeting() const {
  std::string g(kMagic, sizeof kMagic);
  g += static_cast<char>(kVersion);
  g.append(reinterpret_cast<const char*>(server_nonce_.data()), server_nonce_.size());
  return g;
}

bool StoreSession::close(std::string why) {
  state_ = State::Closed;
  why_ = std::move(why);
  data_.release(reserved_);
  reserved_ = 0;
  in_.clear();
  pos_ = 0;
  return false;
}

bool StoreSession::refuse(Refusal r, std::string& out, std::string why) {
  out += 'E';
  out += static_cast<char>(r);
  return close(std::move(why));
}

bool StoreSession::consume(const char* bytes, size_t n, std::string& out) {
  if (state_ == State::Closed) return false;
  if (n > 0) in_.append(bytes, n);
  for (;;) {
    bool progressed = false;
    if (state_ == State::Hello) {
      progressed = hello(out);
    } else {
      progressed = request(out);
    }
    if (state_ == State::Closed) return false;
    // A client that asks faster than it reads gets the rest of its answers
    // once these are sent (the server calls again with no new bytes).
    if (!progressed || out.size() >= kMaxPendingReply) break;
  }
  // Drop what was handled; a request in progress keeps only its own bytes.
  if (pos_ == in_.size()) {
    in_.clear();
    pos_ = 0;
  } else if (pos_ > (size_t{1} << 16)) {
    in_.erase(0, pos_);
    pos_ = 0;
  }
  return true;
}

// The hello: false while incomplete (or after closing).
bool StoreSession::hello(std::string& out) {
  const size_t have = in_.size() - pos_;
  if (have < kNonceBytes + 2) return false;
  const char* p = in_.data() + pos_;
  const size_t job_len = getLe(p + kNonceBytes, 2);
  if (job_len > kMaxJob) return close("a hello with a job name of " + std::to_string(job_len) + " bytes");
  const size_t total = kNonceBytes + 2 + job_len + kMacBytes;
  if (have < total) return false;
  Nonce client{};
  std::memcpy(client.data(), p, kNonceBytes);
  const std::string job(p + kNonceBytes + 2, job_len);
  Mac claimed{};
  std::memcpy(claimed.data(), p + kNonceBytes + 2 + job_len, kMacBytes);
  pos_ += total;
  // The secret first: a client without it learns nothing, not even the job.
  if (!sameMac(claimed, clientProof(secret_, server_nonce_, client, job))) {
    out += 'T';
    return close("a client that does not know this job's secret (KILN_STORE_TOKEN)");
  }
  if (job != job_) {
    out += 'J';
    char len[2];
    putLe(len, job_.size(), 2);
    out.append(len, 2);
    out += job_;
    return close("a client of job '" + job + "', not '" + job_ + "'");
  }
  const Mac mine = serverProof(secret_, server_nonce_, client, job);
  out += 'A';
  out.append(reinterpret_cast<const char*>(mine.data()), mine.size());
  state_ = State::Ready;
  return true;
}

// One request: its header (Ready), then its key and value (Request).
bool StoreSession::request(std::string& out) {
  if (state_ == State::Ready) {
    if (in_.size() - pos_ < kRequestHeader) return false;
    const char* p = in_.data() + pos_;
    op_ = p[0];
    const uint64_t klen = getLe(p + 1, 4), vlen = getLe(p + 5, 8);
    const Limits& lim = data_.limits();
    if ((op_ != 'S' && op_ != 'G') || (op_ == 'G' && vlen != 0))
      return refuse(Refusal::BadRequest, out, "a malformed request (op " + std::to_string(int(op_)) + ")");
    if (klen > lim.max_key) return refuse(Refusal::KeyTooLong, out, "a key of " + std::to_string(klen) + " bytes");
    if (vlen > lim.max_value)
      return refuse(Refusal::ValueTooLarge, out, "a value of " + std::to_string(vlen) + " bytes");
    // Nothing is allocated for the declared sizes: the bytes are counted
    // against the store's total and buffered only as they arrive.
    if (!data_.reserve(klen + vlen))
      return refuse(Refusal::StoreFull, out, "a request of " + std::to_string(klen + vlen) + " bytes to a full store");
    pos_ += kRequestHeader;
    key_len_ = klen;
    value_len_ = vlen;
    reserved_ = klen + vlen;
    state_ = State::Request;
  }
  if (in_.size() - pos_ < key_len_ + value_len_) return false;
  std::string key(in_, pos_, key_len_);
  pos_ += key_len_;
  if (op_ == 'S') {
    std::string value(in_, pos_, value_len_);
    pos_ += value_len_;
    data_.put(std::move(key), std::move(value));  // the reservation now counts the stored bytes
    reserved_ = 0;
    out += 'K';
  } else {
    data_.release(reserved_);
    reserved_ = 0;
    const std::string* v = data_.find(key);
    if (!v) {
      out += 'N';
    } else {
      char head[9];
      head[0] = 'Y';
      putLe(head + 1, v->size(), 8);
      out.append(head, sizeof head);
      out += *v;
    }
  }
  state_ = State::Ready;
  return true;
}

}  // namespace kiln::store
