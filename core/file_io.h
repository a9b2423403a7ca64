// Whole-file reading and atomic writing. Every output file Kiln writes goes
// through writeFileAtomic so a failure never leaves a half-written file.
#pragma once

#include <string>

#include "core/result.h"

namespace kiln {

/// Read a whole file. Errors name the path and the OS reason.
Result<std::string> readFile(const std::string& path);
/// Write `data` to `path` through a temporary file in the same directory and
/// a rename. On failure the temporary is removed and `path` is untouched.
Status writeFileAtomic(const std::string& path, const std::string& data);

}  // namespace kiln
