// libFuzzer target for the safetensors reader. Besides "never crash", checks
// a round-trip property: whatever the reader accepts, the writer writes back
// into a file that reads back to the same tensors and metadata.
#include <cstdlib>
#include <cstring>

#include "core/safetensors.h"

namespace {

bool sameTensor(const kiln::Tensor& a, const kiln::Tensor& b) {
  return a.type() == b.type() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

bool sameFile(const kiln::SafetensorsFile& a, const kiln::SafetensorsFile& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) return false;
  for (auto ia = a.tensors.begin(), ib = b.tensors.begin(); ia != a.tensors.end(); ++ia, ++ib)
    if (ia->first != ib->first || !sameTensor(ia->second, ib->second)) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = kiln::parseSafetensors({data, size}, "fuzz-input");
  if (!parsed.ok()) return 0;
  std::string bytes = kiln::serializeSafetensors(parsed->tensors, parsed->metadata);
  auto again = kiln::parseSafetensors({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "rewritten");
  if (!again.ok() || !sameFile(*parsed, *again)) std::abort();  // the writer produced something the reader rejects
  return 0;
}
