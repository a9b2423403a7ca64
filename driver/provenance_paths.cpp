#include "driver/provenance_paths.h"

#include <algorithm>

namespace kiln::driver {
namespace {

/// Absolute paths in `text`: from a '/' at the start or after a space or
/// '(' to the next space, ':', ')' or ','.
std::vector<std::string> pathsIn(const std::string& text) {
  std::vector<std::string> out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '/' || (i > 0 && text[i - 1] != ' ' && text[i - 1] != '(')) continue;
    size_t end = text.find_first_of(" :),", i);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(i, end - i));
    i = end;
  }
  return out;
}

}  // namespace

std::string commonSourceDir(const std::vector<std::string>& texts) {
  std::string common;
  bool first = true;
  for (const std::string& t : texts)
    for (const std::string& p : pathsIn(t)) {
      const std::string dir = p.substr(0, p.rfind('/') + 1);
      if (first) {
        common = dir;
        first = false;
        continue;
      }
      const auto mismatch = std::mismatch(common.begin(), common.end(), dir.begin(), dir.end());
      common.resize(size_t(mismatch.first - common.begin()));
      common.resize(common.rfind('/') + 1);  // whole directories only
    }
  return common == "/" ? "" : common;
}

std::string relativeToDir(const std::string& text, const std::string& dir) {
  if (dir.empty()) return text;
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const bool starts = (i == 0 || text[i - 1] == ' ' || text[i - 1] == '(') && text.compare(i, dir.size(), dir) == 0;
    if (starts) {
      i += dir.size();
      continue;
    }
    out += text[i++];
  }
  return out;
}

}  // namespace kiln::driver
