#include "collector/http/token.h"

#include <fstream>

#include "common/str_cat.h"

namespace trainscope::http {

Result<std::string> readTokenFile(const std::string& path, const std::string& flag) {
  std::ifstream in(path);
  if (!in) return Result<std::string>::error(flag + ": cannot read " + path);
  std::string line;
  std::getline(in, line);
  const char* kSpace = " \t\r\n";
  auto first = line.find_first_not_of(kSpace);
  if (first == std::string::npos) {
    return Result<std::string>::error(flag + ": " + path + " holds no token (first line empty)");
  }
  line = line.substr(first, line.find_last_not_of(kSpace) - first + 1);
  for (char c : line) {
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) {
      return Result<std::string>::error(
          strCat(flag, ": the token in ", path, " must not contain spaces or control characters"));
    }
  }
  return line;
}

}  // namespace trainscope::http
