#include "core/file_fingerprint.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string_view>
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

/// XXH3-128 of a kind tag, the file's size and `bytes`.
std::string digest(std::string_view kind, uint64_t size, std::string_view bytes) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_128bits_reset(st);
  XXH3_128bits_update(st, kind.data(), kind.size());
  XXH3_128bits_update(st, &size, sizeof size);
  XXH3_128bits_update(st, bytes.data(), bytes.size());
  const std::string out = hex128(XXH3_128bits_digest(st));
  XXH3_freeState(st);
  return out;
}

/// A PyTorch archive's record whose bytes are tensor values, or derived
/// from all records: `<archive>/data/<key>`, `<archive>/.data/serialization_id`.
bool isValueRecord(std::string_view name) {
  const size_t slash = name.find('/');
  if (slash == std::string_view::npos) return false;
  const std::string_view rest = name.substr(slash + 1);
  if (rest == ".data/serialization_id") return true;
  return rest.starts_with("data/") && rest.size() > 5 && rest.find('/', 5) == std::string_view::npos;
}

struct Opened {
  std::ifstream f;
  uint64_t size = 0;
  std::string cd;  ///< the zip central directory; empty when not a zip
};

Result<Opened> open(const std::string& path) {
  Opened o;
  o.f.open(path, std::ios::binary | std::ios::ate);
  if (!o.f) return Error{path + ": cannot open (" + std::strerror(errno) + ")"};
  const auto end = o.f.tellg();
  if (end < 0) return Error{path + ": cannot read its size"};
  o.size = static_cast<uint64_t>(end);
  o.cd = zipCentralDirectory(o.f, o.size);
  return o;
}

Result<std::string> fingerprintOf(Opened& o, const std::string& path) {
  if (!o.cd.empty()) return digest("zip", o.size, o.cd);
  o.f.clear();
  o.f.seekg(0);
  XXH3_state_t* st = XXH3_createState();
  XXH3_128bits_reset(st);
  XXH3_128bits_update(st, "file", 4);
  XXH3_128bits_update(st, &o.size, sizeof o.size);
  std::vector<char> buf(1 << 20);
  while (o.f) {
    o.f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    XXH3_128bits_update(st, buf.data(), static_cast<size_t>(o.f.gcount()));
  }
  const std::string out = hex128(XXH3_128bits_digest(st));
  XXH3_freeState(st);
  if (!o.f.eof()) return Error{path + ": read error"};
  return out;
}

}  // namespace

Result<std::string> fileFingerprint(const std::string& path) {
  auto o = open(path);
  if (!o) return o.error();
  return fingerprintOf(*o, path);
}

Result<ModelFingerprint> modelFingerprint(const std::string& path) {
  auto o = open(path);
  if (!o) return o.error();
  auto contents = fingerprintOf(*o, path);
  if (!contents) return contents.error();
  if (o->cd.empty()) return ModelFingerprint{*contents, *contents};
  // Each entry's name below the archive's root folder (torch.jit.save names
  // it after the file), size and CRC-32 (what it holds, however compressed),
  // the value records' without.
  std::string listing;
  for (const ZipEntry& e : zipEntries(o->cd)) {
    const size_t slash = e.name.find('/');
    listing.append(slash == std::string_view::npos ? e.name : e.name.substr(slash + 1));
    const uint32_t crc = isValueRecord(e.name) ? 0 : e.crc32;
    for (uint32_t v : {e.size, crc}) {
      listing += ' ';
      listing += std::to_string(v);
    }
    listing += "\n";
  }
  return ModelFingerprint{digest("zip structure", 0, listing), *contents};
}

}  // namespace kiln
