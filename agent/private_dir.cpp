#include "agent/private_dir.h"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"

namespace trainscope::agent {

Status ensurePrivateDir(const std::string& dir, const std::string& flag) {
  const uid_t me = ::geteuid();
  if (::mkdir(dir.c_str(), 0700) == 0) {
    logInfo("agent", "created " + dir + " (mode 0700) for " + flag);
    return Status::ok();
  }
  if (errno != EEXIST) {
    return Status::error(flag + ": cannot create " + dir + ": " + std::strerror(errno) +
                         "; create it (mode 0700) or pass another " + flag);
  }
  // Judged on the opened directory, so nothing can be swapped in between.
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    return Status::error(flag + ": " + dir + " exists but is not a directory (" +
                         std::strerror(errno) + "); refusing to put the probe socket there");
  }
  struct stat sb {};
  Status st;
  if (::fstat(fd, &sb) != 0) {
    st = Status::error(flag + ": cannot stat " + dir + ": " + std::strerror(errno));
  } else if (sb.st_uid != me) {
    st = Status::error(flag + ": " + dir + " belongs to uid " + std::to_string(sb.st_uid) +
                       ", not to this agent's uid " + std::to_string(me) +
                       ": another user may have made it to receive the probes' telemetry; "
                       "remove it or pass another " +
                       flag);
  } else if ((sb.st_mode & 077) != 0) {
    if (::fchmod(fd, 0700) != 0) {
      st = Status::error(flag + ": cannot make " + dir +
                         " private (mode 0700): " + std::strerror(errno));
    } else {
      logWarn("agent", dir + " was open to other users; its mode is now 0700");
    }
  }
  ::close(fd);
  return st;
}

}  // namespace trainscope::agent
