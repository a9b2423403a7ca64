#include "core/trace.h"

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "core/file_io.h"

namespace kiln {

int TraceRecorder::tidLocked(std::thread::id id) {
  auto it = tids_.find(id);
  if (it != tids_.end()) return it->second;
  const int tid = static_cast<int>(tids_.size()) + 1;
  tids_[id] = tid;
  names_[tid] = tid == 1 ? "main" : "thread " + std::to_string(tid);
  return tid;
}

void TraceRecorder::nameThread(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  names_[tidLocked(std::this_thread::get_id())] = name;
}

void TraceRecorder::slice(const std::string& name, const std::string& category, Clock::time_point start,
                          Clock::time_point end, std::map<std::string, std::string> args) {
  if (stopped_) return;
  const double ts = std::chrono::duration<double, std::micro>(start - origin_).count();
  const double dur = std::chrono::duration<double, std::micro>(end - start).count();
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back({name, category, tidLocked(std::this_thread::get_id()), ts, dur, std::move(args)});
}

size_t TraceRecorder::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}

std::string TraceRecorder::json() const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  const int pid = static_cast<int>(::getpid());
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", "kiln"}}}});
  for (const auto& [tid, name] : names_)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}});
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
