#include "core/trace.h"

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "core/file_io.h"

namespace kiln {

int TraceRecorder::tidLocked(std::thread::id id) {
  auto it = tids_.find(id);
  if (it != tids_.end()) return it->second;
  const int tid = static_cast<int>(rows_.size()) + 1;
  tids_[id] = tid;
  rows_[tid] = {tid == 1 ? "main" : "thread " + std::to_string(tid), ""};
  return tid;
}

void TraceRecorder::nameThread(const std::string& name, const std::string& kind) {
  std::lock_guard<std::mutex> lock(mu_);
  rows_[tidLocked(std::this_thread::get_id())] = {name, kind};
}

void TraceRecorder::sliceOnRow(const std::string& row, const std::string& kind, const std::string& name,
                               const std::string& category, Clock::time_point start, Clock::time_point end,
                               std::map<std::string, std::string> args) {
  if (stopped_) return;
  const double ts = sinceOrigin(start), dur = sinceOrigin(end) - ts;
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, made] = named_rows_.try_emplace(row, static_cast<int>(rows_.size()) + 1);
  if (made) rows_[it->second] = {row, kind};
  events_.push_back({name, category, it->second, ts, dur, std::move(args)});
}

void TraceRecorder::slice(const std::string& name, const std::string& category, Clock::time_point start,
                          Clock::time_point end, std::map<std::string, std::string> args) {
  if (stopped_) return;
  const double ts = sinceOrigin(start), dur = sinceOrigin(end) - ts;
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back({name, category, tidLocked(std::this_thread::get_id()), ts, dur, std::move(args)});
}

size_t TraceRecorder::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}

std::vector<TraceRecorder::Event> TraceRecorder::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_;
}

std::map<int, TraceRecorder::Row> TraceRecorder::rows() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rows_;
}

std::string TraceRecorder::json() const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  const int pid = static_cast<int>(::getpid());
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", "kiln"}}}});
  for (const auto& [tid, row] : rows_)
    events.push_back(
        {{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", row.name}}}});
  for (const Event& e : events_) {
    nlohmann::ordered_json args = nlohmann::ordered_json::object();
    for (const auto& [k, v] : e.args) {
      char* end = nullptr;
      const double d = std::strtod(v.c_str(), &end);
      if (!v.empty() && end && *end == '\0')
        args[k] = d;
      else
        args[k] = v;
    }
    events.push_back({{"name", e.name},
                      {"cat", e.category},
                      {"ph", "X"},
                      {"pid", pid},
                      {"tid", e.tid},
                      {"ts", e.ts_us},
                      {"dur", e.dur_us},
                      {"args", args}});
  }
  return nlohmann::ordered_json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump(1) + "\n";
}

Status TraceRecorder::write(const std::string& path) const { return writeFileAtomic(path, json()); }

}  // namespace kiln
