#include "driver/report_compare.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <sstream>

#include "driver/messages.h"
#include "driver/provenance_paths.h"

namespace kiln::driver {
namespace {

/// Per-step milliseconds and node counts of the kernels, summed by `key`.
template <class Key>
std::map<std::string, std::pair<double, int64_t>> sumBy(const Report& r, Key key) {
  std::map<std::string, std::pair<double, int64_t>> out;
  for (const ReportKernel& k : r.kernels) {
    auto& [ms, nodes] = out[key(k)];
    ms += k.measured_ms.value_or(0);
    ++nodes;
  }
  return out;
}

template <class Key>
std::vector<TimeDelta> deltas(const Report& a, const Report& b, Key key) {
  std::map<std::string, TimeDelta> rows;
  for (const auto& [k, v] : sumBy(a, key)) {
    TimeDelta& d = rows[k];
    d.key = k;
    d.a_ms = v.first;
    d.a_nodes = v.second;
  }
  for (const auto& [k, v] : sumBy(b, key)) {
    TimeDelta& d = rows[k];
    d.key = k;
    d.b_ms = v.first;
    d.b_nodes = v.second;
  }
  std::vector<TimeDelta> out;
  for (auto& [_, d] : rows) out.push_back(std::move(d));
  // The largest change of time first; without times, of node count.
  std::stable_sort(out.begin(), out.end(), [](const TimeDelta& x, const TimeDelta& y) {
    if (std::fabs(x.diff()) != std::fabs(y.diff())) return std::fabs(x.diff()) > std::fabs(y.diff());
    return std::llabs(x.b_nodes - x.a_nodes) > std::llabs(y.b_nodes - y.a_nodes);
  });
  return out;
}

/// Passes keyed by name and occurrence ("dce", "dce #2").
std::vector<std::pair<std::string, const ReportPass*>> keyedPasses(const Report& r) {
  std::map<std::string, int> seen;
  std::vector<std::pair<std::string, const ReportPass*>> out;
  for (const ReportPass& p : r.passes) {
    const int n = ++seen[p.name];
    out.emplace_back(n == 1 ? p.name : p.name + " #" + std::to_string(n), &p);
  }
  return out;
}

bool hasMeasuredTimes(const Report& r) {
  return !r.kernels.empty() && std::all_of(r.kernels.begin(), r.kernels.end(),
                                           [](const ReportKernel& k) { return k.measured_ms.has_value(); });
}

std::optional<double> meanOver(const Report& r, double (CommStep::*f)() const) {
  if (!r.communication || r.communication->steps.empty()) return std::nullopt;
  double sum = 0;
  for (const CommStep& s : r.communication->steps) sum += (s.*f)();
  return sum / static_cast<double>(r.communication->steps.size());
}

std::optional<double> meanSent(const Report& r) {
  if (!r.communication || r.communication->steps.empty()) return std::nullopt;
  double sum = 0;
  for (const CommStep& s : r.communication->steps) sum += static_cast<double>(s.sentBytes());
  return sum / static_cast<double>(r.communication->steps.size());
}

std::optional<double> measuredSum(const Report& r) {
  if (!hasMeasuredTimes(r)) return std::nullopt;
  double sum = 0;
  for (const ReportKernel& k : r.kernels) sum += *k.measured_ms;
  return sum;
}

std::string cell(std::optional<double> v, const std::string& unit) {
  return v ? formatQuantity(*v, unit) : "-";
}

}  // namespace

std::string ratioText(std::optional<double> a, std::optional<double> b) {
  if (!a || !b || *a == 0) return "";
  std::ostringstream s;
  s << std::fixed << std::setprecision(*b / *a >= 9.995 ? 1 : 2) << *b / *a << "x";
  return s.str();
}

std::optional<double> medianStepMillis(const Report& r) {
  if (!r.steps || r.steps->empty()) return std::nullopt;
  std::vector<double> ms;
  for (size_t i = r.steps->size() > 1 ? 1 : 0; i < r.steps->size(); ++i) ms.push_back((*r.steps)[i].millis);
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  return n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
}

ReportComparison compareReports(const Report& a, const Report& b) {
  ReportComparison c;
  auto row = [&](std::string what, std::string unit, std::optional<double> x, std::optional<double> y) {
    if (x || y) c.summary.push_back({std::move(what), std::move(unit), x, y});
  };
  auto d = [](auto v) { return std::optional<double>(static_cast<double>(v)); };
  row("step time (median)", "ms", medianStepMillis(a), medianStepMillis(b));
  row("kernel time per step", "ms", measuredSum(a), measuredSum(b));
  row("peak memory", "B", d(a.memory.peak_bytes), d(b.memory.peak_bytes));
  row("arena", "B", d(a.memory.arena_bytes), d(b.memory.arena_bytes));
  row("graph nodes", "", d(a.graph.nodes), d(b.graph.nodes));
  row("graph work", "FLOP", d(a.graph.flops), d(b.graph.flops));
  row("parameters", "", d(a.model.params), d(b.model.params));
  row("compile time", "ms", d(a.compile.millis), d(b.compile.millis));
  row("sent per step", "B", meanSent(a), meanSent(b));
  row("communication per step", "ms", meanOver(a, &CommStep::commMillis), meanOver(b, &CommStep::commMillis));
  row("exposed communication", "ms", meanOver(a, &CommStep::exposedMillis),
      meanOver(b, &CommStep::exposedMillis));
  c.measured = hasMeasuredTimes(a) && hasMeasuredTimes(b);
  c.by_op = deltas(a, b, [](const ReportKernel& k) { return k.op.empty() ? k.kernel : k.op; });
  c.by_scope = deltas(a, b, [](const ReportKernel& k) { return k.scope.empty() ? std::string("(top)") : k.scope; });
  c.by_node = deltas(a, b, [](const ReportKernel& k) { return k.node; });
  const auto pa = keyedPasses(a), pb = keyedPasses(b);
  for (const auto& [key, p] : pa) {
    PassDelta row{key, *p, std::nullopt};
    for (const auto& [kb, q] : pb)
      if (kb == key) row.b = *q;
    c.passes.push_back(std::move(row));
  }
  for (const auto& [key, q] : pb)
    if (std::none_of(pa.begin(), pa.end(), [&](const auto& x) { return x.first == key; }))
      c.passes.push_back({key, std::nullopt, *q});
  return c;
}

void printComparison(std::ostream& out, const ReportComparison& c, const std::string& name_a,
                     const std::string& name_b, size_t top) {
  out << "A: " << name_a << "\nB: " << name_b << "\n\n";
  out << std::left << std::setw(26) << "" << std::right << std::setw(12) << "A" << std::setw(12) << "B"
      << std::setw(9) << "B/A" << "\n";
  for (const ComparisonRow& r : c.summary)
    out << std::left << std::setw(26) << r.what << std::right << std::setw(12) << cell(r.a, r.unit) << std::setw(12)
        << cell(r.b, r.unit) << std::setw(9) << ratioText(r.a, r.b) << "\n";

  auto table = [&](const char* title, const std::vector<TimeDelta>& rows, size_t width) {
    out << "\n" << title << (c.measured ? ", by the change in measured time per step" : ", by the change in nodes")
        << (rows.size() > top ? " (the " + std::to_string(top) + " largest of " + std::to_string(rows.size()) + ")"
                              : std::string())
        << ":\n";
    out << "  " << std::left << std::setw(int(width)) << "" << std::right;
    if (c.measured) out << std::setw(11) << "A" << std::setw(11) << "B" << std::setw(12) << "B - A";
    out << std::setw(9) << "A nodes" << std::setw(9) << "B nodes" << "\n";
    std::vector<std::string> keys;
    for (const TimeDelta& d : rows) keys.push_back(d.key);
    const std::string dir = commonSourceDir(keys);  // nodes' source paths relative to the one they share
    size_t shown = 0;
    for (const TimeDelta& d : rows) {
      if (shown++ == top) break;
      if (!c.measured && d.a_nodes == d.b_nodes) break;  // the rest changed nothing
      std::string key = relativeToDir(d.key, dir);
      if (key.size() > width - 1) key = key.substr(0, width - 4) + "...";
      out << "  " << std::left << std::setw(int(width)) << key << std::right;
      // A side without the key shows "-", not a time of 0.
      auto ms = [](double v, int64_t nodes) { return nodes ? formatQuantity(v, "ms") : std::string("-"); };
      if (c.measured)
        out << std::setw(11) << ms(d.a_ms, d.a_nodes) << std::setw(11) << ms(d.b_ms, d.b_nodes) << std::setw(12)
            << (d.diff() > 0 ? "+" : "") + formatQuantity(d.diff(), "ms");
      out << std::setw(9) << d.a_nodes << std::setw(9) << d.b_nodes << "\n";
    }
  };
  table("Ops", c.by_op, 24);
  table("Scopes", c.by_scope, 24);
  table("Nodes", c.by_node, 48);

  out << "\nPasses (nodes and work after each):\n  " << std::left << std::setw(20) << "" << std::right
      << std::setw(9) << "A nodes" << std::setw(9) << "B nodes" << std::setw(13) << "A work" << std::setw(13)
      << "B work" << std::setw(11) << "A time" << std::setw(11) << "B time" << "\n";
  for (const PassDelta& p : c.passes) {
    auto num = [](const std::optional<ReportPass>& x, auto f, const std::string& unit) {
      return x ? formatQuantity(f(*x), unit) : std::string("-");
    };
    out << "  " << std::left << std::setw(20) << p.pass << std::right << std::setw(9)
        << num(p.a, [](const ReportPass& x) { return double(x.nodes); }, "") << std::setw(9)
        << num(p.b, [](const ReportPass& x) { return double(x.nodes); }, "") << std::setw(13)
        << num(p.a, [](const ReportPass& x) { return x.flops; }, "FLOP") << std::setw(13)
        << num(p.b, [](const ReportPass& x) { return x.flops; }, "FLOP") << std::setw(11)
        << num(p.a, [](const ReportPass& x) { return x.millis; }, "ms") << std::setw(11)
        << num(p.b, [](const ReportPass& x) { return x.millis; }, "ms") << "\n";
  }
}

}  // namespace kiln::driver
