// trainscope: the command-line client of the collector's JSON API. See tools/cli/cli.h.
#include <iostream>
#include <string>
#include <vector>

#include "tools/cli/cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return trainscope::cli::runCli(args, std::cout, std::cerr);
}
