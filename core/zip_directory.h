// Reading a zip file's directory and its stored entries without a zip
// library: what the compile cache's fingerprint of a TorchScript archive
// (core/file_fingerprint.h) and the reading of an archive's recorded input
// types (core/import/recorded_inputs.h) need. Zip64 archives and
// compressed entries are not read (the callers fall back on something
// slower: hashing the file whole, importing the model).
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

/// The central directory of the zip file `f` of `size` bytes, or empty when
/// it is not a zip file (or a zip64 one).
std::string zipCentralDirectory(std::ifstream& f, uint64_t size);

/// One entry of a central directory, as its file header says.
struct ZipEntry {
  std::string_view name;  ///< into the directory's bytes
  uint16_t method = 0;    ///< 0: stored
  uint32_t crc32 = 0, compressed_size = 0, size = 0;
  uint32_t local_header = 0;  ///< offset of the entry's local header in the file
};
/// The entries of `cd` (what zipCentralDirectory returns), in order; a
/// header that runs past the end ends the list.
std::vector<ZipEntry> zipEntries(const std::string& cd);

/// The bytes of the first entry of the zip file at `path` whose name ends
/// with `suffix`, when it is stored uncompressed; nullopt when the file is
/// not a zip, has no such entry, or compressed it.
std::optional<std::string> readStoredZipEntry(const std::string& path, const std::string& suffix);

}  // namespace kiln
