// Test helper: a zip file written byte for byte as the format lays it out,
// the way torch.jit.save writes one (stored entries, no compression), so
// tests of the zip reading (core/zip_directory.h) and of what reads through
// it (recorded inputs, model fingerprints) need no zip library and no model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::test {

struct ZipItem {
  std::string name, bytes;
  uint32_t crc = 0;  ///< what the directory claims: readers take the directory's word, not the bytes'
};

inline void put16(std::string& s, uint16_t v) { s.append(reinterpret_cast<const char*>(&v), 2); }
inline void put32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }

/// A zip of `items`; `method` 0 stores, 8 claims deflate (the bytes stay as given).
inline std::string zipOf(const std::vector<ZipItem>& items, uint16_t method = 0) {
  std::string file, cd;
  for (const ZipItem& e : items) {
    const auto offset = static_cast<uint32_t>(file.size()), n = static_cast<uint32_t>(e.bytes.size());
    const auto name_size = static_cast<uint16_t>(e.name.size());
    put32(file, 0x04034b50);
    for (uint16_t v : {uint16_t{20}, uint16_t{0}, method, uint16_t{0}, uint16_t{0}})
      put16(file, v);  // version, flags, method, time, date
    for (uint32_t v : {e.crc, n, n}) put32(file, v);
    put16(file, name_size);
    put16(file, 0);
    file += e.name + e.bytes;
    put32(cd, 0x02014b50);
    for (uint16_t v : {uint16_t{20}, uint16_t{20}, uint16_t{0}, method, uint16_t{0}, uint16_t{0}})
      put16(cd, v);  // made by, needed, flags, method, time, date
    for (uint32_t v : {e.crc, n, n}) put32(cd, v);
    for (uint16_t v : {name_size, uint16_t{0}, uint16_t{0}, uint16_t{0}, uint16_t{0}})
      put16(cd, v);  // name, extra, comment lengths, disk, internal attributes
    put32(cd, 0);    // external attributes
    put32(cd, offset);
    cd += e.name;
  }
  const auto cd_offset = static_cast<uint32_t>(file.size()), count = static_cast<uint32_t>(items.size());
  file += cd;
  put32(file, 0x06054b50);
  for (uint16_t v : {uint16_t{0}, uint16_t{0}, static_cast<uint16_t>(count), static_cast<uint16_t>(count)})
    put16(file, v);  // disk, directory's disk, entries here, entries in all
  put32(file, static_cast<uint32_t>(cd.size()));
  put32(file, cd_offset);
  put16(file, 0);  // comment length
  return file;
}

}  // namespace kiln::test
