#include "core/ir.h"

#include <algorithm>
#include <unordered_map>

#include "core/model.h"
#include "core/op_table.h"
#include "core/result.h"

namespace kiln {

namespace {
constexpr std::string_view kRoleNames[] = {"data", "param", "buffer", "const", "opt_state", "scalar", "intermediate"};
constexpr std::string_view kOutputRoleNames[] = {"output", "buffer_update", "param_update", "opt_state_update",
                                                 "loss", "metric", "gradient"};
}  // namespace

std::string_view roleName(ValueRole r) { return kRoleNames[static_cast<size_t>(r)]; }
std::optional<ValueRole> parseRole(std::string_view s) {
  for (size_t i = 0; i < std::size(kRoleNames); ++i)
    if (kRoleNames[i] == s) return static_cast<ValueRole>(i);
  return std::nullopt;
}
std::string_view outputRoleName(OutputRole r) { return kOutputRoleNames[static_cast<size_t>(r)]; }
std::optional<OutputRole> parseOutputRole(std::string_view s) {
  for (size_t i = 0; i < std::size(kOutputRoleNames); ++i)
    if (kOutputRoleNames[i] == s) return static_cast<OutputRole>(i);
  return std::nullopt;
}

// ---- Node --------------------------------------------------------------------

const std::string& Node::op() const { return def_->name; }

std::string Node::describe() const {
  std::string d = op();
  if (!scope_.empty()) d += " @" + scope_;
  if (!provenance_.empty()) d += " (" + provenance_ + ")";
  return d;
}

const Attr* Node::attr(const std::string& name) const {
  auto it = attrs_.find(name);
  if (it != attrs_.end()) return &it->second;
  const AttrSpec* spec = def_->findAttr(name);
  if (spec && spec->default_value) return &*spec->default_value;
  return nullptr;
}

namespace {
template <typename T>
const T& getAttr(const Node& n, const std::string& name, AttrKind kind) {
  const Attr* a = n.attr(name);
  if (!a) fail(n.describe() + ": missing attribute '" + name + "'");
  if (attrKind(*a) != kind)
    fail(n.describe() + ": attribute '" + name + "' is a " + std::string(attrKindName(attrKind(*a))) +
         ", expected a " + std::string(attrKindName(kind)));
  return std::get<T>(*a);
}
}  // namespace

int64_t Node::i(const std::string& name) const { return getAttr<int64_t>(*this, name, AttrKind::Int); }
double Node::f(const std::string& name) const {
  // An int attribute reads as a float where a float is asked for (e.g. value=0).
  const Attr* a = attr(name);
  if (a && attrKind(*a) == AttrKind::Int) return static_cast<double>(std::get<int64_t>(*a));
  return getAttr<double>(*this, name, AttrKind::Float);
}
const std::vector<int64_t>& Node::is(const std::string& name) const {
  return getAttr<std::vector<int64_t>>(*this, name, AttrKind::Ints);
}
const std::vector<double>& Node::fs(const std::string& name) const {
  return getAttr<std::vector<double>>(*this, name, AttrKind::Floats);
}
const std::string& Node::s(const std::string& name) const {
  return getAttr<std::string>(*this, name, AttrKind::String);
}
DType Node::dt(const std::string& name) const { return getAttr<DType>(*this, name, AttrKind::DType); }
const Graph& Node::subgraph(const std::string& name) const {
  return *getAttr<GraphAttr>(*this, name, AttrKind::Graph).graph;
}

void Node::replaceInput(size_t i, Value* v) {
  Value* old = inputs_.at(i);
  auto& u = old->uses_;
  u.erase(std::find_if(u.begin(), u.end(), [&](const Use& x) { return x.user == this && x.index == i; }));
  inputs_[i] = v;
  v->uses_.push_back({this, i});
}

// ---- Graph -------------------------------------------------------------------

Value* Graph::addInput(const std::string& name, TensorType type, ValueRole role) {
  if (name.empty()) fail("graph input needs a name");
  if (findInput(name)) fail("duplicate graph input '" + name + "'");
  auto v = std::make_unique<Value>();
  v->id_ = next_id_++;
  v->name_ = name;
  v->type_ = std::move(type);
  v->role_ = role;
  inputs_.push_back(std::move(v));
  input_ptrs_.push_back(inputs_.back().get());
  return input_ptrs_.back();
}

Value* Graph::findInput(const std::string& name) const {
  for (Value* v : input_ptrs_)
    if (v->name_ == name) return v;
  return nullptr;
}

Node* Graph::createNode(std::string_view op, std::vector<Value*> inputs, AttrMap attrs, std::string scope,
                        std::string provenance) {
  const OpDef* def = OpTable::get().find(op);
  if (!def) fail("unknown op '" + std::string(op) + "'" + (scope.empty() ? "" : " @" + scope));
  auto n = std::unique_ptr<Node>(new Node());
  n->def_ = def;
  n->kind_ = def->id;
  n->inputs_ = std::move(inputs);
  n->attrs_ = std::move(attrs);
  n->scope_ = std::move(scope);
  n->provenance_ = std::move(provenance);
  int count = static_cast<int>(n->inputs_.size());
  if (count < def->min_inputs || (def->max_inputs >= 0 && count > def->max_inputs))
    fail(n->describe() + ": takes " + std::to_string(def->min_inputs) +
         (def->max_inputs == def->min_inputs ? ""
          : def->max_inputs < 0              ? " or more"
                                             : " to " + std::to_string(def->max_inputs)) +
         " inputs, got " + std::to_string(count));
  for (Value* v : n->inputs_)
    if (!v) fail(n->describe() + ": null input");
  return n.release();
}

void Graph::finishNode(Node* raw, std::vector<TensorType> types) {
  std::unique_ptr<Node> n(raw);
  for (size_t i = 0; i < types.size(); ++i) {
    auto v = std::make_unique<Value>();
    v->id_ = next_id_++;
    v->type_ = std::move(types[i]);
    v->producer_ = n.get();
    v->output_index_ = i;
    n->output_ptrs_.push_back(v.get());
    n->outputs_.push_back(std::move(v));
  }
  for (size_t i = 0; i < n->inputs_.size(); ++i) n->inputs_[i]->uses_.push_back({n.get(), i});
  auto where = insert_before_ ? insert_before_->pos_ : nodes_.end();
  Node* raw_node = n.get();
  raw_node->pos_ = nodes_.insert(where, std::move(n));
}

Node* Graph::create(std::string_view op, std::vector<Value*> inputs, AttrMap attrs, std::string scope,
                    std::string provenance) {
  Node* n = createNode(op, std::move(inputs), std::move(attrs), std::move(scope), std::move(provenance));
  std::vector<TensorType> types;
  try {
    types = n->def_->infer(*n);
  } catch (...) {
    delete n;
    throw;
  }
  finishNode(n, std::move(types));
  return n;
}

Node* Graph::createWithTypes(std::string_view op, std::vector<Value*> inputs, AttrMap attrs,
                             std::vector<TensorType> output_types, std::string scope, std::string provenance) {
  Node* n = createNode(op, std::move(inputs), std::move(attrs), std::move(scope), std::move(provenance));
  finishNode(n, std::move(output_types));
  return n;
}

Value* Graph::add(std::string_view op, std::vector<Value*> inputs, AttrMap attrs, std::string scope,
                  std::string provenance) {
  Node* n = create(op, std::move(inputs), std::move(attrs), std::move(scope), std::move(provenance));
  if (n->numOutputs() != 1) fail(n->describe() + ": has " + std::to_string(n->numOutputs()) + " outputs, expected 1");
  return n->output();
}

void Graph::setInsertPoint(Node* before) { insert_before_ = before; }

void Graph::erase(Node* n) {
  for (Value* out : n->output_ptrs_)
    if (!out->uses_.empty()) fail("cannot erase " + n->describe() + ": its output is still used");
  for (const GraphOutput& o : outputs_)
    for (Value* out : n->output_ptrs_)
      if (o.value == out) fail("cannot erase " + n->describe() + ": its output is a graph output");
  for (size_t i = 0; i < n->inputs_.size(); ++i) {
    auto& u = n->inputs_[i]->uses_;
    u.erase(std::find_if(u.begin(), u.end(), [&](const Use& x) { return x.user == n && x.index == i; }));
  }
  if (insert_before_ == n) {
    auto next = std::next(n->pos_);
    insert_before_ = next == nodes_.end() ? nullptr : next->get();
  }
  nodes_.erase(n->pos_);
}

void Graph::reorder(const std::vector<Node*>& order) {
  if (order.size() != nodes_.size())
    fail("reorder: " + std::to_string(order.size()) + " nodes given for a graph of " + std::to_string(nodes_.size()));
  std::unordered_map<const Node*, bool> placed;  // node of this graph -> already in the new order
  for (const auto& n : nodes_) placed[n.get()] = false;
  for (Node* n : order) {
    auto it = placed.find(n);
    if (it == placed.end()) fail("reorder: a node that is not in this graph");
    if (it->second) fail("reorder: " + n->describe() + " appears twice");
    for (Value* in : n->inputs_)
      if (in->producer_ && !placed.at(in->producer_))
        fail("reorder: " + n->describe() + " would run before the producer of its input " + in->name());
    it->second = true;
  }
  for (Node* n : order) nodes_.splice(nodes_.end(), nodes_, n->pos_);  // splice keeps pos_ valid
}

void Graph::replaceAllUsesWith(Value* from, Value* to) {
  if (from == to) return;
  auto uses = from->uses_;
  for (const Use& u : uses) u.user->replaceInput(u.index, to);
  for (GraphOutput& o : outputs_)
    if (o.value == from) o.value = to;
}

void Graph::addOutput(Value* v, std::string name, OutputRole role) {
  if (!v) fail("null graph output '" + name + "'");
  outputs_.push_back({v, std::move(name), role});
}

size_t Graph::removeUnusedInputs() {
  size_t removed = 0;
  for (size_t i = 0; i < inputs_.size();) {
    Value* v = inputs_[i].get();
    bool is_output = std::any_of(outputs_.begin(), outputs_.end(), [&](auto& o) { return o.value == v; });
    if (v->uses_.empty() && !is_output) {
      inputs_.erase(inputs_.begin() + static_cast<long>(i));
      input_ptrs_.erase(input_ptrs_.begin() + static_cast<long>(i));
      ++removed;
    } else {
      ++i;
    }
  }
  return removed;
}

void Graph::removeInput(Value* v) {
  auto it = std::find_if(inputs_.begin(), inputs_.end(), [&](const auto& p) { return p.get() == v; });
  if (it == inputs_.end()) fail("removeInput: '" + v->name() + "' is not a graph input");
  bool is_output = std::any_of(outputs_.begin(), outputs_.end(), [&](auto& o) { return o.value == v; });
  if (!v->uses_.empty() || is_output) fail("cannot remove graph input '" + v->name() + "': it is still used");
  input_ptrs_.erase(input_ptrs_.begin() + (it - inputs_.begin()));
  inputs_.erase(it);
}

Graph Graph::clone() const {
  Graph g;
  g.name = name;
  std::unordered_map<const Value*, Value*> map;
  for (Value* v : input_ptrs_) {
    Value* nv = g.addInput(v->name_, v->type_, v->role_);
    nv->id_ = v->id_;
    map[v] = nv;
  }
  for (const auto& n : nodes_) {
    std::vector<Value*> ins;
    for (Value* v : n->inputs_) ins.push_back(map.at(v));
    std::vector<TensorType> types;
    for (Value* v : n->output_ptrs_) types.push_back(v->type_);
    Node* c = g.createWithTypes(n->op(), std::move(ins), n->attrs_, std::move(types), n->scope_, n->provenance_);
    for (size_t i = 0; i < n->output_ptrs_.size(); ++i) {
      c->output_ptrs_[i]->id_ = n->output_ptrs_[i]->id_;
      map[n->output_ptrs_[i]] = c->output_ptrs_[i];
    }
  }
  for (const GraphOutput& o : outputs_) g.outputs_.push_back({map.at(o.value), o.name, o.role});
  g.next_id_ = next_id_;
  return g;
}

// ---- Model -------------------------------------------------------------------

TensorMap Model::stateDict() const {
  TensorMap sd;
  for (Value* v : graph.inputs()) {
    if (v->role() != ValueRole::Param && v->role() != ValueRole::Buffer) continue;
    auto it = weights.find(v->name());
    if (it != weights.end()) sd[v->name()] = it->second;
  }
  // Tensors that the graph no longer uses still belong to the state dict.
  for (const auto& [k, t] : weights)
    if (!sd.count(k) && k.rfind("__const", 0) != 0) sd[k] = t;
  for (const auto& [alias, target] : aliases) {
    auto it = weights.find(target);
    if (it != weights.end()) sd[alias] = it->second;
  }
  return sd;
}

}  // namespace kiln
