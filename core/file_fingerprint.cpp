#include "core/file_fingerprint.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>
#include <xxhash.h>

namespace kiln {
namespace {

uint32_t le32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);  // zip is little-endian, as is every host Kiln builds for
  return v;
}

uint16_t le16(const char* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

std::string hex128(XXH128_hash_t h) {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return buf;
}

/// The central directory of a zip file, or empty when `f` is not a zip (or a
/// zip64 one, whose directory this does not locate: those are hashed whole).
std::string centralDirectory(std::ifstream& f, uint64_t size) {
  constexpr uint64_t kEocd = 22, kMaxComment = 65535;
  const uint64_t tail = std::min<uint64_t>(size, kEocd + kMaxComment);
  std::string buf(tail, '\0');
  f.seekg(static_cast<std::streamoff>(size - tail));
  if (!f.read(buf.data(), static_cast<std::streamsize>(tail))) return {};
  for (size_t i = tail >= kEocd ? tail - kEocd + 1 : 0; i-- > 0;) {
    if (le32(&buf[i]) != 0x06054b50) continue;  // end of central directory record
    const uint32_t cd_size = le32(&buf[i + 12]), cd_offset = le32(&buf[i + 16]);
    if (le16(&buf[i + 10]) == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) return {};  // zip64
    if (uint64_t{cd_offset} + cd_size > size) return {};
    std::string cd(cd_size, '\0');
    f.seekg(cd_offset);
    if (!f.read(cd.data(), cd_size)) return {};
    return le32(cd.data()) == 0x02014b50 ? cd : std::string();  // starts with a file header
  }
  return {};
}

}  // namespace

Result<std::string> fileFingerprint(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return Error{path + ": cannot open (" + std::strerror(errno) + ")"};
  const auto end = f.tellg();
  if (end < 0) return Error{path + ": cannot read its size"};
  const uint64_t size = static_cast<uint64_t>(end);
  std::string cd = centralDirectory(f, size);
  XXH3_state_t* st = XXH3_createState();
  XXH3_128bits_reset(st);
  const std::string kind = cd.empty() ? "file" : "zip";
  XXH3_128bits_update(st, kind.data(), kind.size());
  XXH3_128bits_update(st, &size, sizeof size);
  if (!cd.empty()) {
    XXH3_128bits_update(st, cd.data(), cd.size());
  } else {
    f.clear();
    f.seekg(0);
    std::vector<char> buf(1 << 20);
    while (f) {
      f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      XXH3_128bits_update(st, buf.data(), static_cast<size_t>(f.gcount()));
    }
    if (!f.eof()) {
      XXH3_freeState(st);
      return Error{path + ": read error"};
    }
  }
  const std::string out = hex128(XXH3_128bits_digest(st));
  XXH3_freeState(st);
  return out;
}

}  // namespace kiln
