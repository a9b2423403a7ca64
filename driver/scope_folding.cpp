#include "driver/scope_folding.h"

#include <map>
#include <queue>
#include <tuple>
#include <unordered_map>

namespace kiln::driver {
namespace {

/// "h.3.attn" -> {"h", "h.3", "h.3.attn"}.
std::vector<std::string> prefixes(const std::string& scope) {
  std::vector<std::string> out;
  if (scope.empty()) return out;
  for (size_t dot = scope.find('.'); dot != std::string::npos; dot = scope.find('.', dot + 1))
    out.push_back(scope.substr(0, dot));
  out.push_back(scope);
  return out;
}

}  // namespace

std::vector<bool> backwardNodes(const Graph& g) {
  std::unordered_map<const Node*, bool> bw;
  std::vector<bool> out;
  for (const auto& n : g.nodes()) {
    bool b = n->provenance().find("grad of ") != std::string::npos;
    for (const Value* v : n->inputs())
      if (const Node* p = v->producer()) b = b || bw[p];
    bw[n.get()] = b;
    out.push_back(b);
  }
  return out;
}

namespace {

/// The folded scope a node goes into ("" when drawn alone).
std::string foldOf(const Node& n, const std::set<std::string>& open) {
  for (const std::string& p : prefixes(n.scope()))
    if (!open.count(p)) return p;
  return {};
}

size_t countItems(const Graph& g, const std::vector<bool>& backward, const std::set<std::string>& open) {
  std::map<std::pair<std::string, bool>, int> folds;
  size_t alone = 0, i = 0;
  for (const auto& n : g.nodes()) {
    std::string f = foldOf(*n, open);
    if (f.empty())
      ++alone;
    else
      ++folds[{f, backward[i]}];
    ++i;
  }
  return alone + folds.size();  // a one-node fold is drawn as the node: one item either way
}

}  // namespace

std::set<std::string> allScopes(const Graph& g) {
  std::set<std::string> out;
  for (const auto& n : g.nodes())
    for (std::string& p : prefixes(n->scope())) out.insert(std::move(p));
  return out;
}

std::set<std::string> defaultOpenScopes(const Graph& g, size_t max_items) {
  if (g.numNodes() <= max_items) return allScopes(g);
  // Children of each scope, in the order they first appear.
  std::map<std::string, std::vector<std::string>> children;
  std::vector<std::string> roots;
  std::set<std::string> seen;
  for (const auto& n : g.nodes()) {
    const std::vector<std::string> ps = prefixes(n->scope());
    for (size_t i = 0; i < ps.size(); ++i) {
      if (!seen.insert(ps[i]).second) continue;
      (i == 0 ? roots : children[ps[i - 1]]).push_back(ps[i]);
    }
  }
  const std::vector<bool> backward = backwardNodes(g);
  // Open the scope that adds the fewest boxes first: a model's structure
  // (layers, blocks, their parts) before a flat scope of many nodes (the
  // optimizer's one update per parameter).
  std::set<std::string> open;
  size_t items = countItems(g, backward, open);
  using Candidate = std::tuple<size_t, size_t, std::string>;  // boxes added, order seen, scope
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  size_t order = 0;
  auto offer = [&](const std::string& s) {
    open.insert(s);
    const size_t with = countItems(g, backward, open);
    open.erase(s);
    queue.push({with - std::min(with, items), order++, s});
  };
  for (const std::string& r : roots) offer(r);
  while (!queue.empty()) {
    const std::string s = std::get<2>(queue.top());
    queue.pop();
    open.insert(s);
    const size_t with = countItems(g, backward, open);
    if (with > max_items) {
      open.erase(s);
      continue;
    }
    items = with;
    for (const std::string& c : children[s]) offer(c);
  }
  return open;
}

FoldedGraph foldGraph(const Graph& g, const std::set<std::string>& open) {
  FoldedGraph out;
  std::map<std::pair<std::string, bool>, int> fold_item;
  std::vector<const Node*> nodes;
  for (const auto& n : g.nodes()) nodes.push_back(n.get());
  const std::vector<bool> backward = backwardNodes(g);
  // Folds holding one node are drawn as that node.
  std::map<std::pair<std::string, bool>, int> members;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (std::string f = foldOf(*nodes[i], open); !f.empty()) ++members[{f, backward[i]}];
  out.item_of_node.resize(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = *nodes[i];
    const std::pair<std::string, bool> key{foldOf(n, open), backward[i]};
    if (key.first.empty() || members[key] == 1) {
      out.item_of_node[i] = int(out.items.size());
      out.items.push_back({int(i), n.scope(), key.second, false, 1});
      continue;
    }
    auto [it, fresh] = fold_item.emplace(key, int(out.items.size()));
    if (fresh)
      out.items.push_back({-1, key.first, key.second, members.count({key.first, !key.second}) > 0, members[key]});
    out.item_of_node[i] = it->second;
  }
  std::set<std::pair<int, int>> edges;
  std::map<const Node*, size_t> index;
  for (size_t i = 0; i < nodes.size(); ++i) index[nodes[i]] = i;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const Value* v : nodes[i]->inputs())
      if (const Node* p = v->producer()) {
        const int from = out.item_of_node[index.at(p)], to = out.item_of_node[i];
        if (from != to) edges.insert({from, to});
      }
  out.edges.assign(edges.begin(), edges.end());
  return out;
}

}  // namespace kiln::driver
