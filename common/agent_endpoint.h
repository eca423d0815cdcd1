// Where an agent listens for probes by default, so that agents and probes agree without
// configuration: a socket in a directory only its owner can write, not a name in /tmp that
// any user could bind first. Pure apart from reading the environment and stat(); any thread.
//   root:    /run/trainscope/agent.sock                 (/tmp/trainscope-0/ when /run is absent)
//   others:  $XDG_RUNTIME_DIR/trainscope/agent.sock     (/tmp/trainscope-<uid>/ when unset)
// The first is the node agent's (one per node, run by root, serving every user's jobs): its
// directory is mode 0755, so every user reaches the socket but only root can bind there. The
// others are private (0700): a user's own agent for that user's jobs. A probe connects to the
// node agent's socket when it exists there, else to its own user's (defaultProbeEndpoint).
// TRAINSCOPE_AGENT (probes) and --endpoint (agents) override it. The agent refuses a directory
// owned by another user; probes check that the process listening is their own user or root
// (agent/probe/peer_check.h), and the agent gives each (job, rank) to the uid that registered
// it first (agent/probe_side.h).
#pragma once

#include <string>

#include <sys/types.h>

namespace trainscope {

// The node agent's socket directory (root's default), shared by every user's probes.
inline constexpr const char* kNodeAgentSocketDir = "/run/trainscope";

// The directory of the default socket for a process of `uid`, given $XDG_RUNTIME_DIR (may be
// null or empty) and whether /run is a directory. The rule itself, for tests.
std::string agentSocketDirFor(uid_t uid, const char* xdgRuntimeDir, bool haveRun);
// The same for this process (its effective uid, its environment, this machine's /run).
std::string defaultAgentSocketDir();
// "ipc://" + defaultAgentSocketDir() + "/agent.sock": where an agent listens by default.
std::string defaultAgentEndpoint();

// What a probe of `uid` connects to by default: the node agent's socket when `nodeSocketThere`
// (kNodeAgentSocketDir/agent.sock exists, or cannot be looked at for lack of permission: the
// probe then says so rather than quietly using another endpoint), else its own user's default
// endpoint. The rule itself, for tests.
std::string probeEndpointFor(uid_t uid, const char* xdgRuntimeDir, bool haveRun,
                             bool nodeSocketThere);
// The same for this process.
std::string defaultProbeEndpoint();

}  // namespace trainscope
