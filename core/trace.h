// A Chrome trace-event recorder (the JSON that chrome://tracing and Perfetto
// open): `kiln train --trace FILE.json` records a slice per executed node
// (op, kernel, bytes) on the thread that ran it, the data loading on the
// prefetch thread, and the steps, so a user sees where a step's time goes.
// Thread-safe: any thread may add slices; each thread gets a row named when
// it first records (or by nameThread).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/result.h"

namespace kiln {

class TraceRecorder {
 public:
  using Clock = std::chrono::steady_clock;

  TraceRecorder() : origin_(Clock::now()) {}
  /// Name the calling thread's row ("main", "data prefetch").
  void nameThread(const std::string& name);
  /// A complete slice [start, end) on the calling thread; `args` are shown
  /// with it (strings; numbers are written as JSON numbers when they parse).
  void slice(const std::string& name, const std::string& category, Clock::time_point start, Clock::time_point end,
             std::map<std::string, std::string> args = {});
  /// Stop recording (later slices are dropped): `--trace` covers a few steps.
  void stop() { stopped_ = true; }
  bool recording() const { return !stopped_; }
  size_t size() const;
  /// The trace-event JSON ({"traceEvents": [...], "displayTimeUnit": "ms"}).
  std::string json() const;
  /// Written atomically (core/file_io.h).
  Status write(const std::string& path) const;

 private:
  struct Event {
    std::string name, category;
    int tid;
    double ts_us, dur_us;
    std::map<std::string, std::string> args;
  };
  int tidLocked(std::thread::id id);

  Clock::time_point origin_;
  mutable std::mutex mu_;
  std::vector<Event> events_;
  std::map<std::thread::id, int> tids_;
  std::map<int, std::string> names_;
  std::atomic<bool> stopped_{false};
};

/// Records a slice from construction to destruction (no-op without a recorder).
class TraceScope {
 public:
  TraceScope(TraceRecorder* r, std::string name, std::string category, std::map<std::string, std::string> args = {})
      : r_(r && r->recording() ? r : nullptr), name_(std::move(name)), category_(std::move(category)),
        args_(std::move(args)), start_(TraceRecorder::Clock::now()) {}
  ~TraceScope() {
    if (r_) r_->slice(name_, category_, start_, TraceRecorder::Clock::now(), std::move(args_));
  }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  TraceRecorder* r_;
  std::string name_, category_;
  std::map<std::string, std::string> args_;
  TraceRecorder::Clock::time_point start_;
};

}  // namespace kiln
