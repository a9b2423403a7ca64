#include "core/file_fingerprint.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>
#include <xxhash.h>

#include "core/zip_directory.h"

namespace kiln {
namespace {

std::string hex128(XXH128_hash_t h) {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return buf;
}

}  // namespace

Result<std::string> fileFingerprint(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return Error{path + ": cannot open (" + std::strerror(errno) + ")"};
  const auto end = f.tellg();
  if (end < 0) return Error{path + ": cannot read its size"};
  const uint64_t size = static_cast<uint64_t>(end);
  std::string cd = zipCentralDirectory(f, size);
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
