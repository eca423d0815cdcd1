// The one Catch2 main every unit-test executable links. A test name given on the command line
// (meson passes one where an executable holds several tests) that matches no test case fails
// the run (--warn NoTests): Catch2 would otherwise report "No tests ran" and exit 0, so a name
// misspelled in meson.build, or holding a comma (Catch2 splits the spec there), passed
// without running anything.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <vector>

int main(int argc, char* argv[]) {
  std::vector<char*> args(argv, argv + argc);
  char warn[] = "--warn";
  char noTests[] = "NoTests";
  args.push_back(warn);
  args.push_back(noTests);
  return Catch::Session().run(static_cast<int>(args.size()), args.data());
}
