// ensurePrivateDir / ensureNodeSocketDir: the agent keeps its probe socket and its spool in
// directories only its own user can write, so another local user can neither take the probes'
// telemetry by binding the endpoint first nor read or plant spool files. Any thread.
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

// The same checks, but the mode is 0755: every local user may enter it (to connect to the
// node agent's socket, common/agent_endpoint.h) and only this user may create or remove
// anything in it, so no one else can bind the endpoint first. A directory an older agent made
// 0700 is opened to 0755; one open to writes by others is closed to them.
Status ensureNodeSocketDir(const std::string& dir, const std::string& flag);

}  // namespace trainscope::agent
