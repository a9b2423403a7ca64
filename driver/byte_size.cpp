#include "driver/byte_size.h"

#include <cctype>

namespace kiln::driver {

Result<uint64_t> parseByteSize(const std::string& text) {
  const Error bad{"'" + text + "' is not a size; write bytes or a number with a unit, like 512MiB, 2GiB or 1.5GB"};
  size_t used = 0;
  double number = 0;
  try {
    number = std::stod(text, &used);
  } catch (const std::exception&) {
    return bad;
  }
  std::string unit;
  for (char c : text.substr(used))
    if (c != ' ') unit += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!unit.empty() && unit.back() == 'b') unit.pop_back();
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1},          {"k", 1e3},       {"m", 1e6},       {"g", 1e9},       {"t", 1e12},
      {"ki", 1024.0},   {"mi", 1048576.0}, {"gi", 1073741824.0}, {"ti", 1099511627776.0}};
  for (const auto& [name, scale] : kUnits)
    if (unit == name) {
      const double bytes = number * scale;
      if (!(bytes >= 1) || bytes > 1.8e19) return bad;
      return static_cast<uint64_t>(bytes);
    }
  return bad;
}

}  // namespace kiln::driver
