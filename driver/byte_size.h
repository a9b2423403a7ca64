// Sizes in bytes as users write them (--memory-budget, --bucket-size).
#pragma once

#include <cstdint>
#include <string>

#include "core/result.h"

namespace kiln::driver {

/// A size in bytes: "1500000000", "512MiB", "2GiB", "1.5GB", "64 KiB"
/// (K/M/G/T powers of 1000, Ki/Mi/Gi/Ti of 1024; the B and case optional).
Result<uint64_t> parseByteSize(const std::string& text);

}  // namespace kiln::driver
