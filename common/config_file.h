// `--config FILE` for the daemons (trainscope-agent, trainscope-collector): a file of
// `name = value` lines, where name is a long flag without its dashes (`collector = tcp://...`,
// `sync-full = true`), '#' starts a comment, and a value may be in double quotes. The file
// fills what the command line leaves unset: a flag given there wins over the file. Errors
// name FILE:LINE. Called once from a main, before any thread starts.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/status.h"

namespace trainscope {

struct ConfigEntry {
  std::string name;   // the flag without its leading "--"
  std::string value;  // quotes removed
  int line = 0;       // 1-based
};

// The entries of a config file's text; `path` only names the file in errors.
Result<std::vector<ConfigEntry>> parseConfigText(const std::string& text, const std::string& path);

// Adds `--config FILE` to `app`, parses the command line, then applies the file's entries for
// options the command line did not give (checked and converted like flags). Returns -1 to go
// on, or the exit code to return from main: 0 after --help, CLI11's code for a bad flag, 2 for
// an unreadable or bad file (the message on `err`, "FILE:LINE: ...").
int parseWithConfigFile(CLI::App& app, int argc, const char* const* argv, std::ostream& out,
                        std::ostream& err);

}  // namespace trainscope
