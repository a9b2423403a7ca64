// A content fingerprint of a model file that does not read the weights:
// what the compile cache keys on (backend/cache/compile_cache.h).
//
// A zip archive (a TorchScript .pt) is fingerprinted by its central
// directory: every entry's name, sizes and CRC-32, which change whenever any
// byte of any entry does, so a 500 MB archive costs a read of its last few
// kilobytes. Any other file (an FX dump, a safetensors batch) is hashed
// whole. XXH3-128, as 32 hex digits.
#pragma once

#include <string>

#include "core/result.h"

namespace kiln {

Result<std::string> fileFingerprint(const std::string& path);

/// A model file's two fingerprints. `contents` is fileFingerprint's: any
/// byte changes it. `structure` leaves out the values of a TorchScript
/// archive's tensor storages (`<archive>/data/<key>`, and the
/// `.data/serialization_id` PyTorch derives from the records), and the
/// archive's root folder (torch.jit.save names it after the file): their
/// names and sizes stay in, as do the code, the pickles (each tensor's
/// shape, dtype and storage, the module's other attributes) and the
/// constants. Two archives of one architecture with other weights share it
/// whatever their file names, and the
/// compile cache checks such a hit against the graph the import makes
/// (driver/compile.cpp), since an import may read a storage's values into
/// the graph (a 0-d tensor attribute becomes a scalar). For any other file
/// both are the whole file's hash.
struct ModelFingerprint {
  std::string structure, contents;
};
Result<ModelFingerprint> modelFingerprint(const std::string& path);

}  // namespace kiln
