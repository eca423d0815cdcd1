#include "common/config_file.h"

#include <fstream>
#include <map>
#include <ostream>
#include <sstream>

#include "common/str_cat.h"

namespace trainscope {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

bool validName(const std::string& name) {
  if (name.empty() || name[0] == '-') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_';
    if (!ok) return false;
  }
  return true;
}

std::string where(const std::string& path, int line) {
  return path + ':' + std::to_string(line) + ": ";
}

// A value's text: a double-quoted string (\" and \\ escapes, nothing after the closing quote
// but a comment), or everything up to a '#' comment, trimmed.
Result<std::string> valueText(const std::string& raw, const std::string& at) {
  std::string v = trim(raw);
  if (v.empty() || v[0] != '"') {
    const auto hash = v.find('#');
    if (hash != std::string::npos) v = trim(v.substr(0, hash));
    return v;
  }
  std::string out;
  size_t i = 1;
  for (; i < v.size() && v[i] != '"'; ++i) {
    if (v[i] == '\\' && i + 1 < v.size() && (v[i + 1] == '"' || v[i + 1] == '\\')) ++i;
    out += v[i];
  }
  if (i >= v.size()) return Result<std::string>::error(at + "the quoted value has no closing '\"'");
  const std::string rest = trim(v.substr(i + 1));
  if (!rest.empty() && rest[0] != '#') {
    return Result<std::string>::error(at + "unexpected text after the quoted value: '" + rest +
                                      "'");
  }
  return out;
}

}  // namespace

Result<std::vector<ConfigEntry>> parseConfigText(const std::string& text, const std::string& path) {
  std::vector<ConfigEntry> out;
  std::map<std::string, int> seen;
  std::istringstream in(text);
  std::string raw;
  int line = 0;
  while (std::getline(in, raw)) {
    ++line;
    const std::string s = trim(raw);
    if (s.empty() || s[0] == '#') continue;
    const std::string at = where(path, line);
    if (s[0] == '[') {
      return Result<std::vector<ConfigEntry>>::error(
          at + "sections are not supported; write one 'name = value' per line");
    }
    const auto eq = s.find('=');
    if (eq == std::string::npos) {
      return Result<std::vector<ConfigEntry>>::error(strCat(
          at, "expected 'name = value' (the name of a long flag without '--'), got '", s, "'"));
    }
    ConfigEntry e;
    e.name = trim(s.substr(0, eq));
    e.line = line;
    if (!validName(e.name)) {
      return Result<std::vector<ConfigEntry>>::error(at + "'" + e.name +
                                                     "' is not a setting name (a long flag "
                                                     "without '--', e.g. spool-dir)");
    }
    auto value = valueText(s.substr(eq + 1), at);
    if (!value) return value.status();
    e.value = std::move(*value);
    if (auto it = seen.find(e.name); it != seen.end()) {
      return Result<std::vector<ConfigEntry>>::error(
          at + "'" + e.name + "' is already set on line " + std::to_string(it->second));
    }
    seen[e.name] = line;
    out.push_back(std::move(e));
  }
  return out;
}

int parseWithConfigFile(CLI::App& app, int argc, const char* const* argv, std::ostream& out,
                        std::ostream& err) {
  std::string configPath;
  app.add_option("--config", configPath,
                 "read settings from FILE: one 'name = value' per line, name being a long flag "
                 "without '--' (e.g. 'spool-dir = /var/lib/trainscope/agent'), '#' comments; "
                 "flags on the command line win over the file")
      ->type_name("FILE");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e, out, err);
  }
  if (configPath.empty()) return -1;

  std::ifstream in(configPath, std::ios::binary);
  if (!in) {
    err << app.get_name() << ": --config: cannot read '" << configPath << "'\n";
    return 2;
  }
  std::ostringstream text;
  text << in.rdbuf();
  auto entries = parseConfigText(text.str(), configPath);
  if (!entries) {
    err << app.get_name() << ": " << entries.message() << "\n";
    return 2;
  }
  for (const ConfigEntry& e : *entries) {
    const std::string at = where(configPath, e.line);
    CLI::Option* opt =
        e.name == "config" || e.name == "help" ? nullptr : app.get_option_no_throw("--" + e.name);
    if (opt == nullptr) {
      err << app.get_name() << ": " << at << "unknown setting '" << e.name
          << "' (the names are the long flags of --help, without '--')\n";
      return 2;
    }
    if (opt->count() > 0) continue;  // given on the command line, which wins
    for (const CLI::Option* other : opt->get_excludes()) {
      if (other->count() > 0) {
        err << app.get_name() << ": " << at << "'" << e.name << "' cannot be combined with "
            << other->get_name() << "\n";
        return 2;
      }
    }
    try {
      opt->add_result(e.value);
      opt->run_callback();
    } catch (const CLI::Error& ex) {
      err << app.get_name() << ": " << at << e.name << ": " << ex.what() << "\n";
      return 2;
    }
  }
  return -1;
}

}  // namespace trainscope
