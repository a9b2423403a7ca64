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

}  // namespace kiln
