#include "backend/cache/compile_cache.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "core/file_io.h"

namespace kiln {
namespace fs = std::filesystem;
namespace {

constexpr const char* kMagic = "kiln-cache";
constexpr int kFormat = 1;
constexpr const char* kSuffix = ".kce";

std::string hex64(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

bool isEntry(const fs::path& p) { return p.extension() == kSuffix; }

}  // namespace

std::string encodeCacheEntry(const std::string& payload) {
  std::ostringstream h;
  h << kMagic << " " << kFormat << " " << payload.size() << " " << hex64(XXH3_64bits(payload.data(), payload.size()))
    << "\n";
  return h.str() + payload;
}

Result<std::string> decodeCacheEntry(const std::string& bytes) {
  const size_t nl = bytes.find('\n');
  if (nl == std::string::npos || nl > 128) return Error{"no header line"};
  std::istringstream h(bytes.substr(0, nl));
  std::string magic, sum;
  int format = 0;
  uint64_t size = 0;
  if (!(h >> magic >> format >> size >> sum) || magic != kMagic) return Error{"not a kiln cache entry"};
  if (format != kFormat) return Error{"entry format " + std::to_string(format) + ", this kiln reads " + std::to_string(kFormat)};
  if (bytes.size() - nl - 1 != size)
    return Error{"truncated or padded: " + std::to_string(bytes.size() - nl - 1) + " payload bytes, header says " +
                 std::to_string(size)};
  std::string payload = bytes.substr(nl + 1);
  if (hex64(XXH3_64bits(payload.data(), payload.size())) != sum) return Error{"checksum mismatch"};
  return payload;
}

std::string CompileCache::defaultDir() {
  if (const char* d = std::getenv("KILN_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return (fs::path(x) / "kiln").string();
  if (const char* home = std::getenv("HOME"); home && *home) return (fs::path(home) / ".cache" / "kiln").string();
  return (fs::temp_directory_path() / "kiln-cache").string();
}

std::string CompileCache::entryPath(const std::string& key) const { return (fs::path(dir_) / (key + kSuffix)).string(); }

CacheLookup CompileCache::load(const std::string& key) const {
  CacheLookup r;
  const std::string path = entryPath(key);
  std::error_code ec;
  if (!fs::exists(path, ec)) return r;
  auto bytes = readFile(path);
  if (!bytes) {
    r.problem = bytes.error().message;
    return r;
  }
  auto payload = decodeCacheEntry(*bytes);
  if (!payload) {
    r.problem = "cache entry " + path + " is corrupt (" + payload.error().message + "); removed, rebuilding";
    fs::remove(path, ec);
    return r;
  }
  r.payload = std::move(*payload);
  return r;
}

Status CompileCache::store(const std::string& key, const std::string& payload) const {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return Error{"cache directory " + dir_ + ": " + ec.message()};
  return writeFileAtomic(entryPath(key), encodeCacheEntry(payload));
}

void CompileCache::count(const char* what) const {
  const std::string path = (fs::path(dir_) / "stats.json").string();
  nlohmann::json j = nlohmann::json::object();
  if (auto text = readFile(path)) {
    auto parsed = nlohmann::json::parse(*text, nullptr, false);
    if (parsed.is_object()) j = std::move(parsed);
  }
  j[what] = j.value(what, uint64_t{0}) + 1;
  std::error_code ec;
  fs::create_directories(dir_, ec);
  (void)writeFileAtomic(path, j.dump() + "\n");
}

Result<std::vector<CacheEntryInfo>> CompileCache::list() const {
  std::vector<CacheEntryInfo> out;
  std::error_code ec;
  if (!fs::exists(dir_, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    if (!e.is_regular_file() || !isEntry(e.path())) continue;
    const auto mtime = fs::last_write_time(e.path(), ec);
    const auto secs = std::chrono::duration_cast<std::chrono::seconds>(
        std::chrono::file_clock::to_sys(mtime).time_since_epoch());
    out.push_back({e.path().stem().string(), e.path().string(), static_cast<uint64_t>(e.file_size(ec)), secs.count()});
  }
  if (ec) return Error{"cache directory " + dir_ + ": " + ec.message()};
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.modified > b.modified; });
  return out;
}

Result<size_t> CompileCache::clear() const {
  size_t removed = 0;
  std::error_code ec;
  if (!fs::exists(dir_, ec)) return removed;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    const bool ours = isEntry(e.path()) || name == "stats.json" || name.find(".tmp") != std::string::npos;
    if (!e.is_regular_file() || !ours) continue;
    if (!fs::remove(e.path(), ec)) return Error{"cannot remove " + e.path().string() + ": " + ec.message()};
    removed += isEntry(e.path());
  }
  if (ec) return Error{"cache directory " + dir_ + ": " + ec.message()};
  return removed;
}

Result<CacheStats> CompileCache::stats() const {
  CacheStats s;
  s.dir = dir_;
  auto entries = list();
  if (!entries) return entries.error();
  s.entries = entries->size();
  for (const auto& e : *entries) s.bytes += e.bytes;
  if (auto text = readFile((fs::path(dir_) / "stats.json").string())) {
    auto j = nlohmann::json::parse(*text, nullptr, false);
    if (j.is_object()) {
      s.hits = j.value("hit", uint64_t{0});
      s.misses = j.value("miss", uint64_t{0});
      s.corrupt = j.value("corrupt", uint64_t{0});
    }
  }
  return s;
}

}  // namespace kiln
