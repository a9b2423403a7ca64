#include "driver/messages.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>

namespace kiln::driver {

namespace {
std::string g_error_prefix;
}  // namespace

void setErrorPrefix(std::string prefix) { g_error_prefix = std::move(prefix); }

std::ostream& nullStream() {
  static std::ostream null(nullptr);  // no buffer: every write fails silently
  return null;
}

int reportError(const Error& e, bool verbose) {
  std::string msg = g_error_prefix + e.message;
  if (!verbose) {
    size_t nl = msg.find('\n');
    if (nl != std::string::npos) msg = msg.substr(0, nl) + " (run with --verbose for details)";
  }
  std::cerr << "kiln: error: " << msg << "\n";
  return 1;
}

std::string formatQuantity(double v, const std::string& unit) {
  const char* sign = v < 0 ? "-" : "";
  v = std::fabs(v);
  auto digits = [](double x) {  // 3 significant digits, trailing zeros kept
    char buf[32];
    std::snprintf(buf, sizeof buf, x >= 99.95 ? "%.0f" : x >= 9.995 ? "%.1f" : "%.2f", x);
    return std::string(buf);
  };
  if (v == 0) return unit.empty() ? "0" : "0 " + unit;
  if (unit == "ms") {
    if (v < 1) return sign + digits(v * 1000) + " us";
    if (v >= 1000) return sign + digits(v / 1000) + " s";
    return sign + digits(v) + " ms";
  }
  if (unit.empty() && v < 10000 && v == std::floor(v)) return sign + std::to_string(static_cast<int64_t>(v));
  if (v < 999.5 && v == std::floor(v)) return sign + std::to_string(static_cast<int64_t>(v)) + " " + unit;  // "4 B"
  const char* prefixes[] = {"", "K", "M", "G", "T", "P", "E"};
  int i = 0;
  while (v >= 999.5 && i < 6) {
    v /= 1000;
    ++i;
  }
  std::string s = sign + digits(v);
  if (unit.empty()) return i ? s + " " + prefixes[i] : s;
  return s + " " + prefixes[i] + unit;
}

std::string humanCount(double v, const char* unit) {
  const char* prefixes[] = {"", "K", "M", "G", "T", "P"};
  int i = 0;
  while (v >= 1000 && i < 5) {
    v /= 1000;
    ++i;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, i ? "%.2f %s%s" : "%.0f %s%s", v, prefixes[i], unit);
  return buf;
}

}  // namespace kiln::driver
