// The persistent compile cache: one file per compiled step, keyed by a hash
// of everything the compilation depends on (the model's structure and
// shapes through its file fingerprint, the options, the target, the Kiln
// build), so a second compile of the same thing loads instead of compiling.
//
// Where: $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln.
// An entry is KEY.kce: a header line ("kiln-cache 1 <payload bytes>
// <xxh3-64 of the payload>") and the payload (what the caller stores; the
// CLI stores JSON). Entries are written to a temporary file in the same
// directory and renamed into place, so a reader sees a whole entry or none;
// a corrupt or truncated entry (wrong header, size or checksum) is reported,
// deleted and treated as a miss, never used.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"

namespace kiln {

struct CacheEntryInfo {
  std::string key;
  std::string path;
  uint64_t bytes = 0;
  int64_t modified = 0;  ///< seconds since the epoch
};

struct CacheStats {
  std::string dir;
  size_t entries = 0;
  uint64_t bytes = 0;
  uint64_t hits = 0, misses = 0, corrupt = 0;  ///< since the last clear (stats.json)
};

/// What a lookup found.
struct CacheLookup {
  std::optional<std::string> payload;  ///< the entry's payload on a hit
  std::string problem;                 ///< why an existing entry was not used (corrupt, unreadable), or empty
};

class CompileCache {
 public:
  /// $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln.
  static std::string defaultDir();
  explicit CompileCache(std::string dir) : dir_(std::move(dir)) {}
  const std::string& dir() const { return dir_; }

  /// The entry for `key`; a corrupt one is deleted and reported in `problem`.
  CacheLookup load(const std::string& key) const;
  /// Write the entry for `key` atomically (creating the directory).
  Status store(const std::string& key, const std::string& payload) const;
  /// Count a hit, a miss or a corrupt entry in stats.json (best effort: a
  /// counter lost to a concurrent writer does no harm).
  void count(const char* what) const;

  Result<std::vector<CacheEntryInfo>> list() const;
  /// Remove every entry, temporary file and the counters; returns how many entries went.
  Result<size_t> clear() const;
  Result<CacheStats> stats() const;

  std::string entryPath(const std::string& key) const;

 private:
  std::string dir_;
};

/// The entry file's bytes for a payload, and back (decode fails with the reason).
std::string encodeCacheEntry(const std::string& payload);
Result<std::string> decodeCacheEntry(const std::string& bytes);

}  // namespace kiln
