#include "driver/graph_diff.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <unordered_map>

#include "core/text_ir.h"
#include "driver/scope_folding.h"

namespace kiln::driver {
namespace {

std::vector<std::string> splitLines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

/// Node lines of a printed graph: between "graph ...{" and "  return".
std::vector<std::string> nodeLines(const std::string& ir) {
  std::vector<std::string> out;
  bool body = false;
  for (const std::string& line : splitLines(ir)) {
    if (!body) {
      body = line.rfind("graph ", 0) == 0;
      continue;
    }
    if (line.rfind("  return", 0) == 0 || line == "}") break;
    out.push_back(line.substr(line.find_first_not_of(' ')));
  }
  return out;
}

/// "%57, %58 = op(...)" -> "%57, %58"; a node without results is keyed by
/// its line.
std::string resultKey(const std::string& line) {
  if (line.empty() || line[0] != '%') return line;
  const size_t eq = line.find(" = ");
  return eq == std::string::npos ? line : line.substr(0, eq);
}

}  // namespace

Result<PassGraph> parsePassGraph(const std::string& ir, const std::string& where) {
  auto g = parseGraph(ir, where);
  if (!g) return g.error();
  PassGraph out{std::move(*g), nodeLines(ir), {}};
  if (out.lines.size() != out.graph.numNodes())
    return Error{where + ": " + std::to_string(out.lines.size()) + " node lines for " +
                 std::to_string(out.graph.numNodes()) + " nodes"};
  for (const std::string& l : out.lines) out.keys.push_back(resultKey(l));
  return out;
}

GraphDiff diffPassGraphs(const PassGraph& before, const PassGraph& after) {
  GraphDiff d;
  const size_t nb = before.keys.size(), na = after.keys.size();
  d.before.assign(nb, NodeChange::Removed);
  d.after.assign(na, NodeChange::Added);
  d.after_of_before.assign(nb, {});
  d.before_of_after.assign(na, {});
  auto link = [&](int b, int a) {
    auto& ab = d.after_of_before[size_t(b)];
    if (std::find(ab.begin(), ab.end(), a) != ab.end()) return;
    ab.push_back(a);
    d.before_of_after[size_t(a)].push_back(b);
  };
  // 1. The same results: the same node, changed when its line differs.
  std::unordered_map<std::string, int> after_by_key;
  for (size_t i = 0; i < na; ++i) after_by_key.emplace(after.keys[i], int(i));
  for (size_t i = 0; i < nb; ++i) {
    auto it = after_by_key.find(before.keys[i]);
    if (it == after_by_key.end()) continue;
    const NodeChange c = before.lines[i] == after.lines[size_t(it->second)] ? NodeChange::Same : NodeChange::Changed;
    d.before[i] = d.after[size_t(it->second)] = c;
    link(int(i), it->second);
  }
  auto indexOf = [](const Graph& g) {
    std::unordered_map<const Node*, int> idx;
    int k = 0;
    for (const auto& n : g.nodes()) idx[n.get()] = k++;
    return idx;
  };
  const auto bidx = indexOf(before.graph), aidx = indexOf(after.graph);
  std::vector<const Node*> bnodes, anodes;
  for (const auto& n : before.graph.nodes()) bnodes.push_back(n.get());
  for (const auto& n : after.graph.nodes()) anodes.push_back(n.get());
  // 2. Data flow: a node in both graphs whose input k came from a removed
  // node and now comes from an added one.
  for (size_t b = 0; b < nb; ++b) {
    if (d.after_of_before[b].empty() || d.before[b] == NodeChange::Removed) continue;
    const Node* nb_ = bnodes[b];
    const Node* na_ = anodes[size_t(d.after_of_before[b].front())];
    for (size_t k = 0; k < std::min(nb_->numInputs(), na_->numInputs()); ++k) {
      const Node* pb = nb_->input(k)->producer();
      const Node* pa = na_->input(k)->producer();
      if (!pb || !pa) continue;
      const int ib = bidx.at(pb), ia = aidx.at(pa);
      if (d.before[size_t(ib)] == NodeChange::Removed && d.after[size_t(ia)] == NodeChange::Added) link(ib, ia);
    }
  }
  // The graph outputs too (the last node of a rewritten chain feeds one).
  for (size_t k = 0; k < std::min(before.graph.outputs().size(), after.graph.outputs().size()); ++k) {
    const Node* pb = before.graph.outputs()[k].value->producer();
    const Node* pa = after.graph.outputs()[k].value->producer();
    if (pb && pa && d.before[size_t(bidx.at(pb))] == NodeChange::Removed &&
        d.after[size_t(aidx.at(pa))] == NodeChange::Added)
      link(bidx.at(pb), aidx.at(pa));
  }
  // 3. Provenance: same scope and part (scope_folding's backward), one
  // provenance inside the other.
  const std::vector<bool> bback = backwardNodes(before.graph), aback = backwardNodes(after.graph);
  std::map<std::pair<std::string, bool>, std::vector<int>> removed_by_scope;
  for (size_t b = 0; b < nb; ++b)
    if (d.before[b] == NodeChange::Removed) removed_by_scope[{bnodes[b]->scope(), bback[b]}].push_back(int(b));
  for (size_t a = 0; a < na; ++a) {
    if (d.after[a] != NodeChange::Added || anodes[a]->provenance().empty()) continue;
    auto it = removed_by_scope.find({anodes[a]->scope(), aback[a]});
    if (it == removed_by_scope.end()) continue;
    const std::string& pa = anodes[a]->provenance();
    for (int b : it->second) {
      const std::string& pb = bnodes[size_t(b)]->provenance();
      if (!pb.empty() && (pa.find(pb) != std::string::npos || pb.find(pa) != std::string::npos)) link(b, int(a));
    }
  }
  for (NodeChange c : d.before) d.removed += c == NodeChange::Removed, d.changed += c == NodeChange::Changed;
  for (NodeChange c : d.after) d.added += c == NodeChange::Added;
  return d;
}

std::string unifiedDiff(const std::string& before, const std::string& after, int context) {
  const std::vector<std::string> a = splitLines(before), b = splitLines(after);
  // Common prefix and suffix first: passes change a small part of the graph.
  size_t pre = 0;
  while (pre < a.size() && pre < b.size() && a[pre] == b[pre]) ++pre;
  size_t suf = 0;
  while (suf < a.size() - pre && suf < b.size() - pre && a[a.size() - 1 - suf] == b[b.size() - 1 - suf]) ++suf;
  const size_t n = a.size() - pre - suf, m = b.size() - pre - suf;
  // ops[k]: ' ' both, '-' only a, '+' only b, over the middle part; by
  // longest common subsequence, or all out and all in when that would
  // take too much memory.
  std::vector<char> ops;
  if (n * m <= 16'000'000) {
    std::vector<uint32_t> lcs((n + 1) * (m + 1), 0);
    auto at = [&](size_t i, size_t j) -> uint32_t& { return lcs[i * (m + 1) + j]; };
    for (size_t i = n; i-- > 0;)
      for (size_t j = m; j-- > 0;)
        at(i, j) = a[pre + i] == b[pre + j] ? at(i + 1, j + 1) + 1 : std::max(at(i + 1, j), at(i, j + 1));
    size_t i = 0, j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && a[pre + i] == b[pre + j])
        ops.push_back(' '), ++i, ++j;
      else if (i < n && (j == m || at(i + 1, j) >= at(i, j + 1)))
        ops.push_back('-'), ++i;  // removals first
      else
        ops.push_back('+'), ++j;
    }
  } else {
    ops.assign(n, '-');
    ops.insert(ops.end(), m, '+');
  }
  if (std::find_if(ops.begin(), ops.end(), [](char c) { return c != ' '; }) == ops.end()) return {};
  // Whole sequence with the prefix and suffix, then hunks around the changes.
  std::vector<char> all(pre, ' ');
  all.insert(all.end(), ops.begin(), ops.end());
  all.insert(all.end(), suf, ' ');
  std::vector<std::pair<size_t, size_t>> line_of(all.size());  // (a index, b index) at each op
  size_t ia = 0, ib = 0;
  for (size_t k = 0; k < all.size(); ++k) {
    line_of[k] = {ia, ib};
    if (all[k] != '+') ++ia;
    if (all[k] != '-') ++ib;
  }
  std::string out;
  size_t k = 0;
  const size_t ctx = size_t(std::max(context, 0));
  while (k < all.size()) {
    if (all[k] == ' ') {
      ++k;
      continue;
    }
    size_t start = k >= ctx ? k - ctx : 0, end = k;
    // Extend while the next change is within 2*context lines.
    while (end < all.size()) {
      size_t next = end;
      while (next < all.size() && all[next] != ' ') ++next;
      size_t gap = next;
      while (gap < all.size() && all[gap] == ' ') ++gap;
      if (gap < all.size() && gap - next <= 2 * ctx) {
        end = gap;
        continue;
      }
      end = std::min(all.size(), next + ctx);
      break;
    }
    size_t na = 0, nb = 0;
    for (size_t q = start; q < end; ++q) na += all[q] != '+', nb += all[q] != '-';
    out += "@@ -" + std::to_string(line_of[start].first + 1) + "," + std::to_string(na) + " +" +
           std::to_string(line_of[start].second + 1) + "," + std::to_string(nb) + " @@\n";
    for (size_t q = start; q < end; ++q) {
      out += all[q];
      out += all[q] == '+' ? b[line_of[q].second] : a[line_of[q].first];
      out += '\n';
    }
    k = end;
  }
  return out;
}

}  // namespace kiln::driver
