#include "driver/messages.h"

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
