// `trainscope keygen`: writes a CurveZMQ key pair (common/curve_keys.h) for an agent or the
// collector. Needs no collector. Single-threaded like the rest of the CLI.
#pragma once

#include <string>

#include "tools/cli/cli.h"

namespace trainscope::cli {

struct KeygenArgs {
  std::string dir = ".";  // where NAME.key and NAME.pub go
  std::string name;       // "": this host's name (an agent's --node default)
  bool force = false;     // replace existing files
};

// Writes DIR/NAME.key (0600) and DIR/NAME.pub (0644) and prints what goes where. Exit 6 with
// a message when a file exists (without --force), cannot be written, or libzmq lacks CURVE;
// 2 for a --name that is not a plain file name.
int runKeygen(Context& ctx, const KeygenArgs& args);
void addKeygenCommand(CLI::App& app, Action* action);

}  // namespace trainscope::cli
