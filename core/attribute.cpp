#include "core/attribute.h"

#include "core/text_ir.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace kiln {

AttrKind attrKind(const Attr& a) { return static_cast<AttrKind>(a.index()); }

std::string_view attrKindName(AttrKind k) {
  switch (k) {
    case AttrKind::Int: return "int";
    case AttrKind::Float: return "float";
    case AttrKind::Ints: return "int list";
    case AttrKind::Floats: return "float list";
    case AttrKind::String: return "string";
    case AttrKind::DType: return "dtype";
    case AttrKind::Graph: return "graph";
  }
  return "?";
}

std::string formatDouble(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[40];
  // Shortest representation that round-trips.
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

namespace {
std::string quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}
}  // namespace

std::string attrToString(const Attr& a) {
  switch (attrKind(a)) {
    case AttrKind::Int: return std::to_string(std::get<int64_t>(a));
    case AttrKind::Float: return formatDouble(std::get<double>(a));
    case AttrKind::Ints: {
      std::string s = "[";
      for (auto& v : std::get<std::vector<int64_t>>(a)) {
        if (s.size() > 1) s += ',';
        s += std::to_string(v);
      }
      return s + "]";
    }
    case AttrKind::Floats: {
      const auto& v = std::get<std::vector<double>>(a);
      if (v.empty()) return "[.]";  // an empty float list, distinct from an empty int list
      std::string s = "[";
      for (auto& x : v) {
        if (s.size() > 1) s += ',';
        s += formatDouble(x);
      }
      return s + "]";
    }
    case AttrKind::String: return quote(std::get<std::string>(a));
    case AttrKind::DType: return std::string(dtypeName(std::get<DType>(a)));
    case AttrKind::Graph:
      return printGraph(*std::get<GraphAttr>(a).graph, {.scopes = false, .provenance = false, .one_line = true});
  }
  return "";
}

bool GraphAttr::operator==(const GraphAttr& o) const {
  if (graph == o.graph) return true;
  return graph && o.graph && attrToString(Attr{*this}) == attrToString(Attr{o});
}

}  // namespace kiln
