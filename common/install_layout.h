// Where a trainscope binary finds the files installed beside it (the dashboard, the Python
// package, the probe library): meson installs them at fixed places relative to the prefix,
// and a binary finds the prefix from its own path, so a tree installed with DESTDIR or moved
// as a whole works like one installed in place. Pure apart from reading /proc/self/exe; any
// thread.
#pragma once

#include <string>
#include <vector>

namespace trainscope {

// The directory of the running executable, "" when /proc/self/exe cannot be read.
std::string executableDir();

// The installation prefix of an executable in `exeDir` installed into `bindir` (relative to
// the prefix, e.g. "bin"): `exeDir` without bindir's trailing components; "" when `exeDir`
// does not end with them or `bindir` is absolute.
std::string prefixOf(const std::string& exeDir, const std::string& bindir);

// True when `dir` is `root` or lies under it (lexically; "" is inside nothing). A binary run
// from the build tree (`root` = the meson build root) prefers the source tree's files.
bool isInside(const std::string& dir, const std::string& root);

// `dir` under `prefix` when relative, `dir` itself when absolute.
std::string underPrefix(const std::string& prefix, const std::string& dir);

// Where an installed file may be, best first: under the prefix found from `exeDir` (see
// prefixOf), then under `configuredPrefix` (the one the build was configured with). `dir` is
// relative to the prefix or absolute; `name` is appended when not empty.
std::vector<std::string> installedCandidates(const std::string& exeDir, const std::string& bindir,
                                             const std::string& configuredPrefix,
                                             const std::string& dir, const std::string& name = "");

}  // namespace trainscope
