#include "common/agent_endpoint.h"

#include <cstdlib>

#include <sys/stat.h>
#include <unistd.h>

namespace trainscope {

std::string agentSocketDirFor(uid_t uid, const char* xdgRuntimeDir, bool haveRun) {
  if (uid == 0) {
    if (haveRun) return "/run/trainscope";
  } else if (xdgRuntimeDir != nullptr && xdgRuntimeDir[0] == '/') {
    // A relative value is not a runtime directory (the spec says to ignore it).
    return std::string(xdgRuntimeDir) + "/trainscope";
  }
  return "/tmp/trainscope-" + std::to_string(uid);
}

std::string defaultAgentSocketDir() {
  struct stat sb {};
  const bool haveRun = ::stat("/run", &sb) == 0 && S_ISDIR(sb.st_mode);
  return agentSocketDirFor(::geteuid(), std::getenv("XDG_RUNTIME_DIR"), haveRun);
}

std::string defaultAgentEndpoint() {
  return "ipc://" + defaultAgentSocketDir() + "/agent.sock";
}

}  // namespace trainscope
