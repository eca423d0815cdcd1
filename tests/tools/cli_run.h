// Runs the trainscope CLI in-process for the tests of tools/cli: the exit code and what it
// printed. From the test's thread.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "tools/cli/cli.h"

namespace trainscope::cli::testing {

struct Run {
  int code = -1;
  std::string out;
  std::string err;
};

inline Run cli(const std::vector<std::string>& args) {
  std::ostringstream out;
  std::ostringstream err;
  Run r;
  r.code = runCli(args, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

}  // namespace trainscope::cli::testing
