#include "backend/kernel_table.h"

namespace kiln {

Result<DialectOrder> parseDialectOrder(std::string_view list, const std::vector<std::string>& known) {
  DialectOrder order;
  std::string known_list;
  for (const std::string& k : known) known_list += (known_list.empty() ? "" : ", ") + k;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string_view::npos) end = list.size();
    const std::string d(list.substr(start, end - start));
    if (d.empty()) return Error{"--dialects '" + std::string(list) + "': empty name (known: " + known_list + ")"};
    if (std::find(known.begin(), known.end(), d) == known.end())
      return Error{"--dialects: unknown dialect '" + d + "' (known: " + known_list + ")"};
    if (order.rank(d) >= 0 && order.restricted()) return Error{"--dialects: '" + d + "' named twice"};
    order.dialects.push_back(d);
    start = end + 1;
  }
  return order;
}

}  // namespace kiln
