// Structural hash of a graph (xxHash XXH3-64 over its canonical text form
// without scopes and provenance): equal for graphs that compute the same
// thing the same way. Keys the compile cache; tells whether a pass changed
// anything.
#pragma once

#include <cstdint>
#include <string>

#include "core/ir.h"

namespace kiln {

uint64_t structuralHash(const Graph& g);
/// 16 lowercase hex digits.
std::string hashHex(uint64_t h);

}  // namespace kiln
