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

namespace kiln {

/// The central directory of the zip file `f` of `size` bytes, or empty when
/// it is not a zip file (or a zip64 one).
std::string zipCentralDirectory(std::ifstream& f, uint64_t size);

/// The bytes of the first entry of the zip file at `path` whose name ends
/// with `suffix`, when it is stored uncompressed; nullopt when the file is
/// not a zip, has no such entry, or compressed it.
std::optional<std::string> readStoredZipEntry(const std::string& path, const std::string& suffix);

}  // namespace kiln
