// strCat: one string from several pieces, sized once and appended without temporaries
// ("a" + b + "c" makes a new string per '+'). For messages and labels composed of many parts;
// numbers are passed as text (std::to_string, formatMs). Pure, safe from any thread.
#pragma once

#include <string>
#include <string_view>

namespace trainscope {

template <typename... Parts>
std::string strCat(const Parts&... parts) {
  const std::string_view views[] = {std::string_view(parts)...};
  size_t size = 0;
  for (std::string_view v : views) size += v.size();
  std::string out;
  out.reserve(size);
  for (std::string_view v : views) out.append(v);
  return out;
}

}  // namespace trainscope
