#include "core/graph_hash.h"

#include <cstdio>
#include <xxhash.h>

#include "core/text_ir.h"

namespace kiln {

uint64_t structuralHash(const Graph& g) {
  PrintOptions o;
  o.scopes = false;
  o.provenance = false;
  std::string text = printGraph(g, o);
  return XXH3_64bits(text.data(), text.size());
}

std::string hashHex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace kiln
