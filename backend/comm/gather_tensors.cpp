#include "backend/comm/gather_tensors.h"

#include <cstring>
#include <nlohmann/json.hpp>

namespace kiln {
namespace {

/// A rank's tensors as bytes: an 8-byte header length, a JSON header
/// (name, dtype, shape per tensor, in map order), then the data back to back.
std::vector<unsigned char> pack(const TensorMap& tensors) {
  nlohmann::json header = nlohmann::json::array();
  size_t data = 0;
  for (const auto& [name, t] : tensors) {
    header.push_back({{"name", name}, {"dtype", std::string(dtypeName(t.dtype()))}, {"shape", t.shape()}});
    data += t.bytes();
  }
  const std::string text = header.dump();
  std::vector<unsigned char> out(sizeof(uint64_t) + text.size() + data);
  const uint64_t len = text.size();
  std::memcpy(out.data(), &len, sizeof len);
  std::memcpy(out.data() + sizeof len, text.data(), text.size());
  size_t at = sizeof len + text.size();
  for (const auto& [name, t] : tensors) {
    if (t.bytes()) std::memcpy(out.data() + at, t.raw(), t.bytes());
    at += t.bytes();
  }
  return out;
}

void unpack(const unsigned char* p, size_t size, int rank, TensorMap& into) {
  auto bad = [&] { fail("gathering tensors: rank " + std::to_string(rank) + " sent a malformed block"); };
  uint64_t len = 0;
  if (size < sizeof len) bad();
  std::memcpy(&len, p, sizeof len);
  if (len > size - sizeof len) bad();
  const auto header =
      nlohmann::json::parse(reinterpret_cast<const char*>(p) + sizeof len,
                            reinterpret_cast<const char*>(p) + sizeof len + len, nullptr, /*allow_exceptions=*/false);
  if (!header.is_array()) bad();
  size_t at = sizeof len + len;
  for (const auto& e : header) {
    auto dt = parseDType(e.value("dtype", std::string()));
    if (!dt || !e.contains("shape") || !e.contains("name")) bad();
    Tensor t(*dt, e["shape"].get<Shape>());
    if (t.bytes() > size - at) bad();
    if (t.bytes()) std::memcpy(t.raw(), p + at, t.bytes());
    at += t.bytes();
    into.emplace(e["name"].get<std::string>(), std::move(t));  // a lower rank's copy stays
  }
}

}  // namespace

TensorMap allGatherTensors(Communicator& comm, const TensorMap& mine) {
  const std::vector<unsigned char> block = pack(mine);
  const size_t n = static_cast<size_t>(comm.size()), r = static_cast<size_t>(comm.rank());
  std::vector<int64_t> sizes(n, 0);
  sizes[r] = static_cast<int64_t>(block.size());
  comm.allGather(sizes.data(), std::vector<size_t>(n, 1), DType::I64);
  std::vector<size_t> counts(n);
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    counts[i] = static_cast<size_t>(sizes[i]);
    total += counts[i];
  }
  std::vector<unsigned char> all(total);
  size_t offset = 0;
  for (size_t i = 0; i < r; ++i) offset += counts[i];
  if (!block.empty()) std::memcpy(all.data() + offset, block.data(), block.size());
  comm.allGather(all.data(), counts, DType::U8);
  TensorMap out;
  offset = 0;
  for (size_t i = 0; i < n; ++i) {
    unpack(all.data() + offset, counts[i], static_cast<int>(i), out);
    offset += counts[i];
  }
  return out;
}

void broadcastBytes(Communicator& comm, std::string& bytes, int root) {
  uint64_t len = bytes.size();
  comm.broadcast(&len, sizeof len, root);
  bytes.resize(len);
  if (len) comm.broadcast(bytes.data(), len, root);
}

}  // namespace kiln
