#include "driver/timeline.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>

#include "driver/messages.h"

namespace kiln::driver {
namespace {

int rowOrder(const TimelineRow& r) {
  if (r.kind == "executor") return 0;
  if (r.kind == "pool") return 1;
  if (r.kind == "prefetch") return 2;
  if (r.kind == "comm") return 3;
  return 4;
}

std::string arg(const TraceRecorder::Event& e, const char* key) {
  auto it = e.args.find(key);
  return it == e.args.end() ? std::string() : it->second;
}

double number(const TraceRecorder::Event& e, const char* key, double otherwise) {
  const std::string v = arg(e, key);
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  return v.empty() || *end ? otherwise : d;
}

/// What a slice's tooltip adds to its name.
std::string detailOf(const TraceRecorder::Event& e) {
  if (e.category == "node")
    return "kernel " + arg(e, "kernel") + ", writes " + formatQuantity(number(e, "bytes", 0), "B") + ", " +
           arg(e, "threads") + " thread(s)";
  if (e.category == "comm")
    return arg(e, "collective") + " (" + arg(e, "algorithm") + "), " + formatQuantity(number(e, "bytes", 0), "B") +
           " sent; queued " + formatQuantity(number(e, "queued_ms", 0), "ms") + ", the executor waited " +
           formatQuantity(number(e, "waited_ms", 0), "ms");
  return {};
}

/// The union of [start, end) intervals clipped to [lo, hi), sorted and merged.
std::vector<std::pair<double, double>> merged(std::vector<std::pair<double, double>> spans, double lo, double hi) {
  std::vector<std::pair<double, double>> out;
  std::sort(spans.begin(), spans.end());
  for (auto [a, b] : spans) {
    a = std::max(a, lo);
    b = std::min(b, hi);
    if (b <= a) continue;
    if (!out.empty() && a <= out.back().second)
      out.back().second = std::max(out.back().second, b);
    else
      out.push_back({a, b});
  }
  return out;
}

double length(const std::vector<std::pair<double, double>>& spans) {
  double s = 0;
  for (const auto& [a, b] : spans) s += b - a;
  return s;
}

/// Length of `spans` not covered by `cover` (both merged).
double outside(const std::vector<std::pair<double, double>>& spans,
               const std::vector<std::pair<double, double>>& cover) {
  double s = 0;
  for (const auto& [a, b] : spans) {
    double inside = 0;
    for (const auto& [c, d] : cover) inside += std::max(0.0, std::min(b, d) - std::max(a, c));
    s += b - a - inside;
  }
  return s;
}

}  // namespace

ReportTimeline timelineFromTrace(const TraceRecorder& trace, int64_t threads) {
  ReportTimeline t;
  std::map<int, TimelineRow> rows;
  for (const auto& [tid, r] : trace.rows()) {
    TimelineRow row{r.name, r.kind, 0};
    if (r.kind == "pool") row.thread = std::atoll(r.name.substr(r.name.find_last_of(' ') + 1).c_str());
    rows[tid] = row;
  }
  // Pool threads that ran no stage still lend themselves to the kernels.
  int next_tid = rows.empty() ? 1 : rows.rbegin()->first + 1;
  for (int64_t k = 1; k < threads; ++k) {
    const bool seen = std::any_of(rows.begin(), rows.end(),
                                  [&](const auto& r) { return r.second.kind == "pool" && r.second.thread == k; });
    if (!seen) rows[next_tid++] = {"cpu pool " + std::to_string(k), "pool", k};
  }
  std::vector<std::pair<int, TimelineRow>> order(rows.begin(), rows.end());
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    const int oa = rowOrder(a.second), ob = rowOrder(b.second);
    return oa != ob ? oa < ob : a.second.thread < b.second.thread;
  });
  std::map<int, int64_t> index;
  for (const auto& [tid, row] : order) {
    index[tid] = static_cast<int64_t>(t.rows.size());
    t.rows.push_back(row);
  }
  const std::vector<TraceRecorder::Event> events = trace.events();
  double origin = -1;
  for (const auto& e : events)
    if (e.category == "step" && (origin < 0 || e.ts_us < origin)) origin = e.ts_us;
  if (origin < 0) return t;
  for (const auto& e : events) {
    const double start = (e.ts_us - origin) / 1000.0, dur = e.dur_us / 1000.0;
    if (e.category == "step") {
      t.steps.push_back({static_cast<int64_t>(number(e, "step", 0)), start, start + dur});
      continue;
    }
    if (start + dur < 0) continue;  // before the first step (a batch made while compiling)
    TimelineSlice s;
    s.row = index.at(e.tid);
    s.category = e.category;
    s.name = e.name;
    s.start_ms = start;
    s.dur_ms = dur;
    s.node = static_cast<int64_t>(number(e, "index", -1));
    s.threads = static_cast<int64_t>(number(e, "threads", 0));
    s.detail = detailOf(e);
    t.slices.push_back(std::move(s));
  }
  std::sort(t.steps.begin(), t.steps.end(), [](const auto& a, const auto& b) { return a.start_ms < b.start_ms; });
  std::stable_sort(t.slices.begin(), t.slices.end(),
                   [](const auto& a, const auto& b) { return a.start_ms < b.start_ms; });
  return t;
}

std::vector<RowActivity> rowActivity(const ReportTimeline& t, size_t step) {
  std::vector<RowActivity> out(t.rows.size());
  if (step >= t.steps.size()) return out;
  const double lo = t.steps[step].start_ms, hi = t.steps[step].end_ms;
  std::vector<std::vector<std::pair<double, double>>> busy(t.rows.size());
  std::vector<std::vector<std::pair<double, double>>> lent(t.rows.size());
  for (const TimelineSlice& s : t.slices) {
    if (s.category == "wait" || s.row < 0 || size_t(s.row) >= t.rows.size()) continue;
    busy[size_t(s.row)].push_back({s.start_ms, s.start_ms + s.dur_ms});
    if (s.category != "node" || t.rows[size_t(s.row)].kind != "executor") continue;
    for (size_t r = 0; r < t.rows.size(); ++r)  // the kernel's team: pool threads 1..threads-1
      if (t.rows[r].kind == "pool" && t.rows[r].thread < s.threads)
        lent[r].push_back({s.start_ms, s.start_ms + s.dur_ms});
  }
  for (size_t r = 0; r < t.rows.size(); ++r) {
    const auto own = merged(busy[r], lo, hi);
    out[r].busy_ms = length(own);
    out[r].intra_op_ms = outside(merged(lent[r], lo, hi), own);
    out[r].idle_ms = std::max(0.0, hi - lo - out[r].busy_ms - out[r].intra_op_ms);
  }
  return out;
}

}  // namespace kiln::driver
