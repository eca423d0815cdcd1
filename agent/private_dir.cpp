#include "agent/private_dir.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"

namespace trainscope::agent {
namespace {

std::string octal(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

// `mode` is 0700 (private) or 0755 (others may enter); either way only we may write.
Status ensureOwnDir(const std::string& dir, const std::string& flag, mode_t mode) {
  const uid_t me = ::geteuid();
  const bool created = ::mkdir(dir.c_str(), mode) == 0;
  if (!created && errno != EEXIST) {
    return Status::error(flag + ": cannot create " + dir + ": " + std::strerror(errno) +
                         "; create it (mode " + octal(mode) + ") or pass another " + flag);
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
  } else if ((sb.st_mode & 07777) != mode) {
    // The umask may have taken bits from a directory just made; one of ours found open to
    // others' writes (or, for the node socket, closed to them by an older agent) is set right.
    if (::fchmod(fd, mode) != 0) {
      st = Status::error(flag + ": cannot set the mode of " + dir + " to " + octal(mode) + ": " +
                         std::strerror(errno));
    } else if (created) {
      // Nothing to say: the umask only.
    } else if ((sb.st_mode & 022) != 0) {
      logWarn("agent", dir + " was open to writes by other users (mode " + octal(sb.st_mode) +
                           "); its mode is now " + octal(mode));
    } else {
      logInfo("agent", dir + " had mode " + octal(sb.st_mode) + "; its mode is now " + octal(mode));
    }
  }
  if (created && st) logInfo("agent", "created " + dir + " (mode " + octal(mode) + ") for " + flag);
  ::close(fd);
  return st;
}

}  // namespace

Status ensurePrivateDir(const std::string& dir, const std::string& flag) {
  return ensureOwnDir(dir, flag, 0700);
}

Status ensureNodeSocketDir(const std::string& dir, const std::string& flag) {
  return ensureOwnDir(dir, flag, 0755);
}

}  // namespace trainscope::agent
