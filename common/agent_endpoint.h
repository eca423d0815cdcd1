// Where an agent listens for probes by default, so that agents and probes agree without
// configuration: a socket in a directory only its owner can enter, not a name in /tmp that
// any user could bind first. Pure apart from reading the environment and stat(); any thread.
//   root:    /run/trainscope/agent.sock                 (/tmp/trainscope-0/ when /run is absent)
//   others:  $XDG_RUNTIME_DIR/trainscope/agent.sock     (/tmp/trainscope-<uid>/ when unset)
// TRAINSCOPE_AGENT (probes) and --endpoint (agents) override it. The agent creates the
// directory with mode 0700 and refuses one owned by another user; probes check that the
// process listening there is their own user or root (agent/probe/peer_check.h).
#pragma once

#include <string>

#include <sys/types.h>

namespace trainscope {

// The directory of the default socket for a process of `uid`, given $XDG_RUNTIME_DIR (may be
// null or empty) and whether /run is a directory. The rule itself, for tests.
std::string agentSocketDirFor(uid_t uid, const char* xdgRuntimeDir, bool haveRun);
// The same for this process (its effective uid, its environment, this machine's /run).
std::string defaultAgentSocketDir();
// "ipc://" + defaultAgentSocketDir() + "/agent.sock".
std::string defaultAgentEndpoint();

}  // namespace trainscope
