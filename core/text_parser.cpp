// Parser half of the text IR (see text_ir.h for the grammar). A small lexer
// and a recursive-descent parser; every error says where (line:column) and
// what was expected. Hardened for fuzzing: no recursion on input nesting,
// overflow-checked numbers, bounded sizes.
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <unordered_map>
#include <utility>

#include "core/op_table.h"
#include "core/text_ir.h"

namespace kiln {
namespace {

enum class Tok { End, Ident, ValueRef, Number, String, Punct };

struct Token {
  Tok kind = Tok::End;
  std::string text;  ///< identifier, value name (without %), string contents, number text, punctuation
  int line = 1, col = 1;
};

class Lexer {
 public:
  Lexer(const std::string& src, std::string where) : src_(src), where_(std::move(where)) {}

  Token next() {
    skipSpace();
    Token t;
    t.line = line_;
    t.col = col_;
    if (pos_ >= src_.size()) return t;
    char c = src_[pos_];
    if (c == '%') {
      advance();
      t.kind = Tok::ValueRef;
      if (pos_ < src_.size() && src_[pos_] == '"') {
        t.text = readString();
      } else {
        t.text = readWhile([](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.'; });
        if (t.text.empty()) error(t, "expected a value name after '%'");
      }
    } else if (c == '"') {
      t.kind = Tok::String;
      t.text = readString();
    } else if (std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+' ||
               (c == '.' && pos_ + 1 < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1])))) {
      t.kind = Tok::Number;
      t.text = readWhile([](char ch) {
        return std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '-' || ch == '+';
      });
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      t.kind = Tok::Ident;
      t.text = readWhile([](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.'; });
    } else {
      t.kind = Tok::Punct;
      t.text = std::string(1, c);
      advance();
    }
    return t;
  }

  [[noreturn]] void error(const Token& t, const std::string& msg) const {
    fail(where_ + ":" + std::to_string(t.line) + ":" + std::to_string(t.col) + ": " + msg);
  }

 private:
  void advance() {
    if (src_[pos_] == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    ++pos_;
  }
  void skipSpace() {
    while (pos_ < src_.size()) {
      char c = src_[pos_];
      if (c == '/' && pos_ + 1 < src_.size() && src_[pos_ + 1] == '/') {  // comment to end of line
        while (pos_ < src_.size() && src_[pos_] != '\n') advance();
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        advance();
      } else {
        break;
      }
    }
  }
  template <typename F>
  std::string readWhile(F pred) {
    size_t start = pos_;
    while (pos_ < src_.size() && pred(src_[pos_])) advance();
    return src_.substr(start, pos_ - start);
  }
  std::string readString() {
    Token at{Tok::String, "", line_, col_};
    advance();  // opening quote
    std::string out;
    while (true) {
      if (pos_ >= src_.size() || src_[pos_] == '\n') error(at, "unterminated string");
      char c = src_[pos_];
      advance();
      if (c == '"') break;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= src_.size()) error(at, "unterminated string");
      char e = src_[pos_];
      advance();
      if (e == 'n') {
        out += '\n';
      } else if (e == 'x') {
        if (pos_ + 2 > src_.size()) error(at, "bad \\x escape");
        std::string hex = src_.substr(pos_, 2);
        char* end = nullptr;
        long v = std::strtol(hex.c_str(), &end, 16);
        if (end != hex.c_str() + 2) error(at, "bad \\x escape");
        advance();
        advance();
        out += static_cast<char>(v);
      } else {
        out += e;
      }
    }
    return out;
  }

  const std::string& src_;
  std::string where_;
  size_t pos_ = 0;
  int line_ = 1, col_ = 1;
};

class Parser {
 public:
  Parser(const std::string& text, const std::string& where) : lex_(text, where) { tok_ = lex_.next(); }

  Graph parse() {
    Graph g = parseGraphText();
    if (tok_.kind != Tok::End) lex_.error(tok_, "unexpected text after the graph");
    return g;
  }

 private:
  /// How deep regions may nest (a fused body holds no region today).
  static constexpr int kMaxRegionDepth = 4;

  /// "graph name(inputs) { nodes return ... }", into a graph of its own.
  Graph parseGraphText() {
    expectIdent("graph");
    if (tok_.kind == Tok::Ident || tok_.kind == Tok::String) {
      g_.name = tok_.text;
      bump();
    }
    expectPunct("(");
    if (!isPunct(")")) {
      do parseInput();
      while (acceptPunct(","));
    }
    expectPunct(")");
    expectPunct("{");
    while (!(tok_.kind == Tok::Ident && tok_.text == "return")) {
      if (tok_.kind == Tok::End) lex_.error(tok_, "missing 'return' before end of input");
      parseNode();
    }
    bump();
    if (tok_.kind == Tok::ValueRef) {
      do parseReturn();
      while (acceptPunct(","));
    }
    expectPunct("}");
    return std::move(g_);
  }

  /// A region: a graph-valued attribute, parsed with its own values.
  GraphAttr parseRegion() {
    if (depth_ >= kMaxRegionDepth) lex_.error(tok_, "regions nested too deep");
    Graph outer = std::exchange(g_, Graph{});
    auto outer_values = std::exchange(values_, {});
    ++depth_;
    Graph region = parseGraphText();
    --depth_;
    g_ = std::move(outer);
    values_ = std::move(outer_values);
    return GraphAttr{std::make_shared<const Graph>(std::move(region))};
  }

  void bump() { tok_ = lex_.next(); }
  bool isPunct(const char* p) const { return tok_.kind == Tok::Punct && tok_.text == p; }
  bool acceptPunct(const char* p) {
    if (!isPunct(p)) return false;
    bump();
    return true;
  }
  void expectPunct(const char* p) {
    if (!acceptPunct(p)) lex_.error(tok_, std::string("expected '") + p + "', got " + describe(tok_));
  }
  void expectIdent(const char* word) {
    if (tok_.kind != Tok::Ident || tok_.text != word)
      lex_.error(tok_, std::string("expected '") + word + "', got " + describe(tok_));
    bump();
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Tok::End: return "end of input";
      case Tok::ValueRef: return "'%" + t.text + "'";
      case Tok::String: return "a string";
      default: return "'" + t.text + "'";
    }
  }

  int64_t parseInt(const Token& t) {
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(t.text.c_str(), &end, 10);
    if (errno || end != t.text.c_str() + t.text.size()) lex_.error(t, "invalid integer '" + t.text + "'");
    return v;
  }
  double parseDouble(const Token& t) {
    if (t.text == "inf") return INFINITY;
    if (t.text == "-inf") return -INFINITY;
    if (t.text == "nan") return NAN;
    char* end = nullptr;
    double v = std::strtod(t.text.c_str(), &end);
    if (end != t.text.c_str() + t.text.size()) lex_.error(t, "invalid number '" + t.text + "'");
    return v;
  }
  static bool looksFloat(const std::string& s) {
    return s.find_first_of(".eE") != std::string::npos || s == "inf" || s == "-inf" || s == "nan";
  }

  TensorType parseType() {
    Token at = tok_;
    if (tok_.kind != Tok::Ident) lex_.error(tok_, "expected a type like f32[2,3], got " + describe(tok_));
    auto dt = parseDType(tok_.text);
    if (!dt) lex_.error(tok_, "unknown dtype '" + tok_.text + "'");
    bump();
    TensorType t{*dt, {}};
    expectPunct("[");
    if (!isPunct("]")) {
      do {
        if (tok_.kind != Tok::Number) lex_.error(tok_, "expected a dimension, got " + describe(tok_));
        int64_t d = parseInt(tok_);
        if (d < 0) lex_.error(tok_, "negative dimension");
        if (t.shape.size() >= 64) lex_.error(tok_, "too many dimensions");
        t.shape.push_back(d);
        bump();
      } while (acceptPunct(","));
    }
    expectPunct("]");
    (void)at;
    return t;
  }

  void parseInput() {
    if (tok_.kind != Tok::ValueRef) lex_.error(tok_, "expected a graph input like %x: f32[2] data");
    Token name = tok_;
    bump();
    expectPunct(":");
    TensorType t = parseType();
    if (tok_.kind != Tok::Ident) lex_.error(tok_, "expected an input role (data, param, buffer, ...)");
    auto role = parseRole(tok_.text);
    if (!role || *role == ValueRole::Intermediate) lex_.error(tok_, "unknown input role '" + tok_.text + "'");
    bump();
    if (values_.count(name.text)) lex_.error(name, "duplicate value %" + name.text);
    values_[name.text] = g_.addInput(name.text, t, *role);
  }

  Value* lookup(const Token& t) {
    auto it = values_.find(t.text);
    if (it == values_.end()) lex_.error(t, "use of undefined value %" + t.text);
    return it->second;
  }

  Attr parseAttrValue() {
    Token at = tok_;
    if (tok_.kind == Tok::Number) {
      bump();
      if (looksFloat(at.text)) return parseDouble(at);
      return parseInt(at);
    }
    if (tok_.kind == Tok::String) {
      bump();
      return at.text;
    }
    if (tok_.kind == Tok::Ident && tok_.text == "graph") return parseRegion();
    if (tok_.kind == Tok::Ident) {
      bump();
      if (at.text == "inf" || at.text == "nan") return parseDouble(at);
      if (auto dt = parseDType(at.text)) return *dt;
      lex_.error(at, "unknown attribute value '" + at.text + "'");
    }
    if (acceptPunct("[")) {
      if (acceptPunct(".")) {  // "[.]": empty float list
        expectPunct("]");
        return std::vector<double>{};
      }
      std::vector<Token> items;
      if (!isPunct("]")) {
        do {
          if (tok_.kind != Tok::Number && !(tok_.kind == Tok::Ident && (tok_.text == "inf" || tok_.text == "nan")))
            lex_.error(tok_, "expected a number in the list, got " + describe(tok_));
          items.push_back(tok_);
          bump();
        } while (acceptPunct(","));
      }
      expectPunct("]");
      bool any_float = false;
      for (auto& i : items) any_float |= looksFloat(i.text);
      if (any_float) {
        std::vector<double> v;
        for (auto& i : items) v.push_back(parseDouble(i));
        return v;
      }
      std::vector<int64_t> v;
      for (auto& i : items) v.push_back(parseInt(i));
      return v;
    }
    lex_.error(tok_, "expected an attribute value, got " + describe(tok_));
  }

  void parseNode() {
    std::vector<Token> outs;
    if (tok_.kind == Tok::ValueRef) {
      do {
        if (tok_.kind != Tok::ValueRef) lex_.error(tok_, "expected a result name like %3");
        outs.push_back(tok_);
        bump();
      } while (acceptPunct(","));
      expectPunct("=");
    }
    Token op = tok_;
    if (tok_.kind != Tok::Ident) lex_.error(tok_, "expected an op name, got " + describe(tok_));
    if (!OpTable::get().find(op.text)) lex_.error(op, "unknown op '" + op.text + "'");
    bump();
    expectPunct("(");
    std::vector<Value*> ins;
    if (!isPunct(")")) {
      do {
        if (tok_.kind != Tok::ValueRef) lex_.error(tok_, "expected an operand like %3, got " + describe(tok_));
        ins.push_back(lookup(tok_));
        bump();
      } while (acceptPunct(","));
    }
    expectPunct(")");
    AttrMap attrs;
    if (acceptPunct("{")) {
      if (!isPunct("}")) {
        do {
          if (tok_.kind != Tok::Ident) lex_.error(tok_, "expected an attribute name, got " + describe(tok_));
          Token key = tok_;
          bump();
          expectPunct("=");
          if (attrs.count(key.text)) lex_.error(key, "attribute '" + key.text + "' given twice");
          attrs[key.text] = parseAttrValue();
        } while (acceptPunct(","));
      }
      expectPunct("}");
    }
    expectPunct(":");
    std::vector<TensorType> types;
    if (!outs.empty()) {
      do types.push_back(parseType());
      while (acceptPunct(","));
    }
    if (types.size() != outs.size())
      lex_.error(op, std::to_string(outs.size()) + " results but " + std::to_string(types.size()) + " types");
    std::string scope, loc;
    if (acceptPunct("@")) {
      if (tok_.kind != Tok::Ident && tok_.kind != Tok::String && tok_.kind != Tok::Number)
        lex_.error(tok_, "expected a scope after '@'");
      scope = tok_.text;
      bump();
    }
    if (tok_.kind == Tok::Ident && tok_.text == "loc") {
      bump();
      expectPunct("(");
      if (tok_.kind != Tok::String) lex_.error(tok_, "expected a string in loc(...)");
      loc = tok_.text;
      bump();
      expectPunct(")");
    }
    Node* n;
    try {
      parseStringRegions(op.text, attrs);
      n = g_.createWithTypes(op.text, std::move(ins), std::move(attrs), std::move(types), scope, loc);
    } catch (const KilnException& e) {
      lex_.error(op, e.what());
    }
    for (size_t i = 0; i < outs.size(); ++i) {
      if (values_.count(outs[i].text)) lex_.error(outs[i], "value %" + outs[i].text + " is defined twice");
      values_[outs[i].text] = n->output(i);
    }
  }

  void parseReturn() {
    Value* v = lookup(tok_);
    bump();
    if (tok_.kind != Tok::String) lex_.error(tok_, "expected the output's name as a string, got " + describe(tok_));
    std::string name = tok_.text;
    bump();
    OutputRole role = OutputRole::Output;
    if (tok_.kind == Tok::Ident) {
      auto r = parseOutputRole(tok_.text);
      if (!r) lex_.error(tok_, "unknown output role '" + tok_.text + "'");
      role = *r;
      bump();
    }
    g_.addOutput(v, name, role);
  }

  Lexer lex_;
  Token tok_;
  Graph g_;
  std::unordered_map<std::string, Value*> values_;
  int depth_ = 0;
};

}  // namespace

void parseStringRegions(std::string_view op, AttrMap& attrs) {
  const OpDef* def = OpTable::get().find(op);
  if (!def) return;
  for (auto& [name, value] : attrs) {
    if (attrKind(value) != AttrKind::String) continue;
    const AttrSpec* spec = def->findAttr(name);
    if (!spec || spec->kind != AttrKind::Graph) continue;
    auto region = parseGraph(std::get<std::string>(value), std::string(op) + " " + name);
    if (!region) fail("attribute '" + name + "': " + region.error().message);
    value = GraphAttr{std::make_shared<const Graph>(std::move(*region))};
  }
}

Result<Graph> parseGraph(const std::string& text, const std::string& where) {
  return catchErrors([&] { return Parser(text, where).parse(); });
}

}  // namespace kiln
