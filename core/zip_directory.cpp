#include "core/zip_directory.h"

#include <algorithm>
#include <cstring>

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

}  // namespace

std::string zipCentralDirectory(std::ifstream& f, uint64_t size) {
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

std::vector<ZipEntry> zipEntries(const std::string& cd) {
  std::vector<ZipEntry> out;
  // Central directory file headers: 46 fixed bytes, then name, extra, comment.
  for (size_t p = 0; p + 46 <= cd.size() && le32(&cd[p]) == 0x02014b50;) {
    const uint16_t name_len = le16(&cd[p + 28]), extra_len = le16(&cd[p + 30]), comment_len = le16(&cd[p + 32]);
    if (p + 46 + name_len > cd.size()) break;
    ZipEntry e;
    e.name = std::string_view(cd).substr(p + 46, name_len);
    e.method = le16(&cd[p + 10]);
    e.crc32 = le32(&cd[p + 16]);
    e.compressed_size = le32(&cd[p + 20]);
    e.size = le32(&cd[p + 24]);
    e.local_header = le32(&cd[p + 42]);
    out.push_back(e);
    p += 46 + size_t{name_len} + extra_len + comment_len;
  }
  return out;
}

std::optional<std::string> readStoredZipEntry(const std::string& path, const std::string& suffix) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return std::nullopt;
  const auto end = f.tellg();
  if (end < 0) return std::nullopt;
  const uint64_t size = static_cast<uint64_t>(end);
  const std::string cd = zipCentralDirectory(f, size);
  for (const ZipEntry& e : zipEntries(cd)) {
    if (!e.name.ends_with(suffix)) continue;
    const uint32_t stored_size = e.compressed_size, local = e.local_header;
    if (e.method != 0 || stored_size == 0xFFFFFFFF) return std::nullopt;  // compressed, or zip64 sizes
    // The local header: 30 fixed bytes, then its own name and extra lengths.
    char header[30];
    f.seekg(local);
    if (!f.read(header, sizeof header) || le32(header) != 0x04034b50) return std::nullopt;
    const uint64_t data = uint64_t{local} + 30 + le16(header + 26) + le16(header + 28);
    if (data + stored_size > size) return std::nullopt;
    std::string bytes(stored_size, '\0');
    f.seekg(static_cast<std::streamoff>(data));
    if (!f.read(bytes.data(), stored_size)) return std::nullopt;
    return bytes;
  }
  return std::nullopt;
}

}  // namespace kiln
