// kiln cache list|clear|stats [--cache-dir DIR]: the compile cache
// (backend/cache/compile_cache.h) that kiln train, compile, memory and bench
// read and write.
#include <ctime>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "backend/cache/compile_cache.h"
#include "cli/commands.h"
#include "core/file_io.h"
#include "driver/messages.h"
#include "driver/model_args.h"

namespace kiln::cli {
namespace {

struct CacheCmd {
  std::string dir;
};

std::string when(int64_t secs) {
  std::time_t t = static_cast<std::time_t>(secs);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return buf;
}

/// The model an entry was compiled from (its payload's "model"), or "?".
std::string entryModel(const std::string& path) {
  auto bytes = readFile(path);
  if (!bytes) return "? (unreadable)";
  auto payload = decodeCacheEntry(*bytes);
  if (!payload) return "? (corrupt: " + payload.error().message + ")";
  auto j = nlohmann::json::parse(*payload, nullptr, false);
  if (!j.is_object()) return "? (not JSON)";
  return j.value("model", std::string("?")) + ", " + std::to_string(j.value("nodes", 0)) + " nodes";
}

int list(const CompileCache& cache) {
  auto entries = cache.list();
  if (!entries) return reportError(entries.error());
  std::cout << entries->size() << " entries in " << cache.dir() << "\n";
  for (const CacheEntryInfo& e : *entries)
    std::cout << "  " << e.key << "  " << std::setw(10) << humanCount(static_cast<double>(e.bytes), "B") << "  "
              << when(e.modified) << "  " << entryModel(e.path) << "\n";
  return 0;
}

int clear(const CompileCache& cache) {
  auto n = cache.clear();
  if (!n) return reportError(n.error());
  std::cout << "removed " << *n << " entries from " << cache.dir() << "\n";
  return 0;
}

int stats(const CompileCache& cache) {
  auto s = cache.stats();
  if (!s) return reportError(s.error());
  std::cout << "directory " << s->dir << "\n"
            << "entries   " << s->entries << " (" << humanCount(static_cast<double>(s->bytes), "B") << ")\n"
            << "hits      " << s->hits << "\n"
            << "misses    " << s->misses << "\n"
            << "corrupt or stale entries replaced " << s->corrupt << "\n";
  return 0;
}

}  // namespace

void addCacheCommand(CLI::App& app) {
  auto c = std::make_shared<CacheCmd>();
  CLI::App* sub = app.add_subcommand("cache", "the compile cache: list, clear or stats");
  sub->require_subcommand(1);
  sub->add_option("--cache-dir", c->dir,
                  "cache directory (default: $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln)");
  auto run = [c](int (*fn)(const CompileCache&)) {
    return [c, fn] {
      int rc = fn(CompileCache(c->dir.empty() ? CompileCache::defaultDir() : c->dir));
      if (rc) throw CLI::RuntimeError(rc);
    };
  };
  sub->add_subcommand("list", "every entry: key, size, when, the model it was compiled from")->callback(run(list));
  sub->add_subcommand("clear", "remove every entry and the counters")->callback(run(clear));
  sub->add_subcommand("stats", "entries, bytes, hits, misses, corrupt entries replaced")->callback(run(stats));
}

}  // namespace kiln::cli
