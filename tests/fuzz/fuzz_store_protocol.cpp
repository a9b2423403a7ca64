// libFuzzer target for the rendezvous store's server side
// (backend/comm/store_protocol.h): arbitrary client bytes, fed in chunks of
// varying size, never crash, leak or exceed the limits. The first input byte
// chooses whether a valid hello (computed here, as a client would) comes
// first, so the fuzzer reaches the request parser, and how the rest is cut.
// Checked after every chunk: the store's count of its bytes equals what it
// holds plus the request in progress, within Limits::max_total; pending
// replies stay near kMaxPendingReply.
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/comm/socket_io.h"
#include "backend/comm/store_protocol.h"

namespace {

using namespace kiln::store;

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  ++data;
  --size;
  Limits lim;
  lim.max_key = 64;
  lim.max_value = 4096;
  lim.max_total = 16384;
  StoreData store(lim);
  const std::string secret = "fuzz-secret", job = "fuzz-job";
  Nonce server{}, client{};
  server.fill(7);
  client.fill(9);
  {
    StoreSession session(store, secret, job, server);
    std::string out;
    if (mode & 1) {
      const Mac mac = clientProof(secret, server, client, job);
      std::string hello(reinterpret_cast<const char*>(client.data()), client.size());
      char len[2];
      kiln::putLe(len, job.size(), 2);
      hello.append(len, 2);
      hello += job;
      hello.append(reinterpret_cast<const char*>(mac.data()), mac.size());
      check(session.consume(hello.data(), hello.size(), out));
      check(session.authenticated() && out.size() == 1 + kMacBytes && out[0] == 'A');
      out.clear();
    }
    const size_t chunk = size_t{1} << ((mode >> 1) & 7);  // 1 .. 128 bytes at a time
    bool open = true;
    for (size_t at = 0; at < size && open; at += chunk) {
      const size_t n = std::min(chunk, size - at);
      open = session.consume(reinterpret_cast<const char*>(data) + at, n, out);
      // Replies held back are sent before more is read, as the server does.
      while (open && session.buffered() > 0 && out.size() >= kMaxPendingReply) {
        out.clear();
        open = session.consume(nullptr, 0, out);
      }
      check(out.size() <= kMaxPendingReply + lim.max_value + 16);
      out.clear();
      check(store.used() <= lim.max_total);
      check(store.used() >= store.storedBytes());
      check(store.used() - store.storedBytes() <= lim.max_key + lim.max_value);
    }
    if (!open) check(!session.why().empty());
  }
  check(store.used() == store.storedBytes());  // a request cut short gave its bytes back
  return 0;
}
