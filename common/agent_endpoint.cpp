#include "common/agent_endpoint.h"

#include <cerrno>
#include <cstdlib>

#include <sys/stat.h>
#include <unistd.h>

namespace trainscope {
namespace {

bool haveRunDir() {
  struct stat sb {};
  return ::stat("/run", &sb) == 0 && S_ISDIR(sb.st_mode);
}

}  // namespace

std::string agentSocketDirFor(uid_t uid, const char* xdgRuntimeDir, bool haveRun) {
  if (uid == 0) {
    if (haveRun) return kNodeAgentSocketDir;
  } else if (xdgRuntimeDir != nullptr && xdgRuntimeDir[0] == '/') {
    // A relative value is not a runtime directory (the spec says to ignore it).
    return std::string(xdgRuntimeDir) + "/trainscope";
  }
  return "/tmp/trainscope-" + std::to_string(uid);
}

std::string defaultAgentSocketDir() {
  return agentSocketDirFor(::geteuid(), std::getenv("XDG_RUNTIME_DIR"), haveRunDir());
}

std::string defaultAgentEndpoint() {
  return "ipc://" + defaultAgentSocketDir() + "/agent.sock";
}

std::string probeEndpointFor(uid_t uid, const char* xdgRuntimeDir, bool haveRun,
                             bool nodeSocketThere) {
  if (haveRun && nodeSocketThere)
    return "ipc://" + std::string(kNodeAgentSocketDir) + "/agent.sock";
  return "ipc://" + agentSocketDirFor(uid, xdgRuntimeDir, haveRun) + "/agent.sock";
}

std::string defaultProbeEndpoint() {
  const std::string nodeSocket = std::string(kNodeAgentSocketDir) + "/agent.sock";
  struct stat sb {};
  const bool there = ::lstat(nodeSocket.c_str(), &sb) == 0 ? S_ISSOCK(sb.st_mode) : errno == EACCES;
  return probeEndpointFor(::geteuid(), std::getenv("XDG_RUNTIME_DIR"), haveRunDir(), there);
}

}  // namespace trainscope
