// ensurePrivateDir: the agent keeps its probe socket and its spool in directories only its own
// user can enter, so another local user can neither take the probes' telemetry by binding the
// endpoint first nor read or plant spool files. Any thread.
#pragma once

#include <string>

#include "common/status.h"

namespace trainscope::agent {

// Makes `dir` a directory only this process's user can enter: created with mode 0700 (its
// parent must exist), or, when it exists, a real directory (not a link) owned by our
// effective uid, its mode tightened to 0700 if needed. Fails, naming `flag` (the option that
// chose the directory) and saying why, when another user owns it (it may have been made to
// receive the probes' telemetry) or it cannot be created.
Status ensurePrivateDir(const std::string& dir, const std::string& flag);

}  // namespace trainscope::agent
