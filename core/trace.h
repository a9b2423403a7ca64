// A Chrome trace-event recorder (the JSON that chrome://tracing and Perfetto
// open): `kiln train --trace FILE.json` records a slice per executed node
// (op, kernel, bytes) on the thread that ran it, the data loading on the
// prefetch thread, and the steps, so a user sees where a step's time goes.
// Thread-safe: any thread may add slices; each thread gets a row named when
// it first records (or by nameThread). Work that no thread of this process
// stands for (a collective on the wire, placed from the engine's record)
// goes on a named row of its own (sliceOnRow). kiln train --report keeps
// the slices as the report's timeline (driver/timeline.h).
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
  /// One recorded slice, and one row (a thread, or a row of sliceOnRow).
  struct Event {
    std::string name, category;
    int tid;
    double ts_us, dur_us;  ///< from the recorder's creation
    std::map<std::string, std::string> args;
  };
  struct Row {
    std::string name;
    /// What runs there: "executor", "pool", "prefetch", "comm" or "" (any other).
    std::string kind;
  };

  /// Name the calling thread's row ("main", "data prefetch") and say what it is.
  void nameThread(const std::string& name, const std::string& kind = "");
  /// A complete slice [start, end) on the calling thread; `args` are shown
  /// with it (strings; numbers are written as JSON numbers when they parse).
  void slice(const std::string& name, const std::string& category, Clock::time_point start, Clock::time_point end,
             std::map<std::string, std::string> args = {});
  /// A complete slice on the row named `row` (made on first use) rather
  /// than the calling thread's.
  void sliceOnRow(const std::string& row, const std::string& kind, const std::string& name,
                  const std::string& category, Clock::time_point start, Clock::time_point end,
                  std::map<std::string, std::string> args = {});
  /// Stop recording (later slices are dropped): `--trace` covers a few steps.
  void stop() { stopped_ = true; }
  bool recording() const { return !stopped_; }
  size_t size() const;
  /// The slices so far, in the order they were recorded, and the rows by id.
  std::vector<Event> events() const;
  std::map<int, Row> rows() const;
  /// The trace-event JSON ({"traceEvents": [...], "displayTimeUnit": "ms"}).
  std::string json() const;
  /// Written atomically (core/file_io.h).
  Status write(const std::string& path) const;

 private:
  int tidLocked(std::thread::id id);
  double sinceOrigin(Clock::time_point t) const {
    return std::chrono::duration<double, std::micro>(t - origin_).count();
  }

  Clock::time_point origin_;
  mutable std::mutex mu_;
  std::vector<Event> events_;
  std::map<std::thread::id, int> tids_;
  std::map<std::string, int> named_rows_;  ///< sliceOnRow's rows
  std::map<int, Row> rows_;
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
