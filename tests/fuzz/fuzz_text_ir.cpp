// libFuzzer target: the text IR parser, then (when it parses) the verifier,
// printer and re-parse, which must round-trip.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/text_ir.h"
#include "core/verifier.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto g = kiln::parseGraph(text, "fuzz");
  if (!g.ok()) return 0;
  (void)kiln::verify(*g);
  std::string printed = kiln::printGraph(*g);
  auto again = kiln::parseGraph(printed, "reprint");
  if (!again.ok() || kiln::printGraph(*again) != printed) std::abort();  // round-trip broken
  return 0;
}
