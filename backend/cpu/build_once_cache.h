// A map from a key to a value built on its first use, safe to use from
// several threads. Values are built outside the lock, so different keys
// build at the same time: kernel selection runs on the pool
// (CpuExecutor::create) and oneDNN compiles (JITs) each convolution's
// primitives while other threads compile others. When two threads build the
// same key at once, the first value stored is kept and the other dropped.
// A null value (nothing to build for this key) is remembered too.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace kiln::cpu {

template <class V>
class BuildOnceCache {
 public:
  template <class Build>
  const V* get(const std::string& key, Build&& build) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = map_.find(key);
      if (it != map_.end()) return it->second.get();
    }
    std::unique_ptr<V> built = build();
    std::lock_guard<std::mutex> lock(mu_);
    return map_.emplace(key, std::move(built)).first->second.get();
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<V>> map_;
};

}  // namespace kiln::cpu
