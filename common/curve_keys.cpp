#include "common/curve_keys.h"

#include <zmq.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace trainscope {
namespace {

constexpr size_t kZ85Chars = 40;

bool validZ85Key(const std::string& key) {
  if (key.size() != kZ85Chars) return false;
  uint8_t binary[32];
  return zmq_z85_decode(binary, key.c_str()) != nullptr;
}

// The value of `name = "VALUE"` (or unquoted) in a zcert-style file, "" when absent.
std::string field(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t at = line.find(name);
    if (at == std::string::npos || line.find('#') < at) continue;
    size_t eq = line.find('=', at + name.size());
    if (eq == std::string::npos) continue;
    std::string value = line.substr(eq + 1);
    const size_t first = value.find_first_not_of(" \t\"");
    const size_t last = value.find_last_not_of(" \t\"\r");
    if (first == std::string::npos) return "";
    return value.substr(first, last - first + 1);
  }
  return "";
}

Result<std::string> readText(const std::string& path, struct stat* sb) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Result<std::string>::error(path + ": " + std::strerror(errno));
  if (::fstat(fd, sb) != 0 || !S_ISREG(sb->st_mode) || sb->st_size > off_t{64} * 1024) {
    ::close(fd);
    return Result<std::string>::error(path + ": not a key file (a regular file under 64 KiB)");
  }
  std::string text(static_cast<size_t>(sb->st_size), '\0');
  ssize_t n = ::read(fd, text.data(), text.size());
  ::close(fd);
  if (n < 0) return Result<std::string>::error(path + ": " + std::strerror(errno));
  text.resize(static_cast<size_t>(n));
  return text;
}

Status writeFile(const std::string& path, const std::string& text, mode_t mode, bool overwrite) {
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (overwrite ? O_TRUNC : O_EXCL);
  int fd = ::open(path.c_str(), flags, mode);
  if (fd < 0) {
    return Status::error(path + ": " + std::strerror(errno) +
                         (errno == EEXIST ? " (pass --force to replace it)" : ""));
  }
  // The mode of an existing file, and the umask's effect on a new one, are set explicitly.
  const bool ok = ::fchmod(fd, mode) == 0 &&
                  ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int err = errno;
  ::close(fd);
  if (!ok) return Status::error(path + ": " + std::strerror(err));
  return Status::ok();
}

}  // namespace

Status curveAvailable(const std::string& what) {
  if (zmq_has("curve") != 0) return Status::ok();
  return Status::error(what +
                       ": this libzmq was built without CURVE support (zmq_has(\"curve\") "
                       "is false); install a libzmq built with libsodium, such as "
                       "Debian's libzmq5");
}

Result<CurveKeyPair> generateCurveKeyPair() {
  if (Status st = curveAvailable("keygen"); !st) return st;
  char pub[kZ85Chars + 1] = {};
  char sec[kZ85Chars + 1] = {};
  if (zmq_curve_keypair(pub, sec) != 0) {
    return Result<CurveKeyPair>::error(std::string("zmq_curve_keypair: ") +
                                       zmq_strerror(zmq_errno()));
  }
  return CurveKeyPair{pub, sec};
}

Status writeCurveKeyFiles(const std::string& dir, const std::string& name, const CurveKeyPair& keys,
                          bool overwrite) {
  const std::string header = "#   trainscope CURVE key for " + name + " (ZeroMQ Z85)\n";
  const std::string pub = header + "#   public: give it to the other side\nmetadata\ncurve\n" +
                          "    public-key = \"" + keys.publicKey + "\"\n";
  const std::string sec = header + "#   SECRET: keep it on this machine, mode 0600\nmetadata\n" +
                          "curve\n    public-key = \"" + keys.publicKey + "\"\n" +
                          "    secret-key = \"" + keys.secretKey + "\"\n";
  if (Status st = writeFile(dir + "/" + name + ".key", sec, 0600, overwrite); !st) return st;
  return writeFile(dir + "/" + name + ".pub", pub, 0644, overwrite);
}

Result<CurveKeyPair> readCurveSecretFile(const std::string& path) {
  struct stat sb {};
  auto text = readText(path, &sb);
  if (!text) return text.status();
  if ((sb.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%03o", static_cast<unsigned>(sb.st_mode & 0777));
    return Result<CurveKeyPair>::error(path + ": a secret key other users can read (mode " + mode +
                                       "); chmod 600 it");
  }
  CurveKeyPair keys{field(*text, "public-key"), field(*text, "secret-key")};
  if (!validZ85Key(keys.secretKey)) {
    return Result<CurveKeyPair>::error(path + ": no secret-key = \"<40 Z85 characters>\"");
  }
  char derived[kZ85Chars + 1] = {};
  if (zmq_curve_public(derived, keys.secretKey.c_str()) != 0) {
    return Result<CurveKeyPair>::error(path + ": " + zmq_strerror(zmq_errno()));
  }
  if (!keys.publicKey.empty() && keys.publicKey != derived) {
    return Result<CurveKeyPair>::error(path + ": its public-key does not belong to its secret-key");
  }
  keys.publicKey = derived;
  return keys;
}

Result<std::string> readCurvePublicFile(const std::string& path) {
  struct stat sb {};
  auto text = readText(path, &sb);
  if (!text) return text.status();
  std::string key = field(*text, "public-key");
  if (key.empty()) {
    // A bare key: the file's only word.
    std::istringstream in(*text);
    in >> key;
  }
  if (!validZ85Key(key)) {
    return Result<std::string>::error(path + ": no public-key = \"<40 Z85 characters>\"");
  }
  return key;
}

Result<CurveServerKeys> readCurveServerKeys(const std::string& dir) {
  if (Status st = curveAvailable("--curve-keys"); !st) return st;
  CurveServerKeys out;
  auto server = readCurveSecretFile(dir + "/server.key");
  if (!server) return server.status();
  out.server = *server;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/agents", ec)) {
    if (e.path().extension() != ".pub") continue;
    auto key = readCurvePublicFile(e.path().string());
    if (!key) return key.status();
    const std::string node = e.path().stem().string();
    auto [it, fresh] = out.agents.emplace(*key, node);
    if (!fresh) {
      return Result<CurveServerKeys>::error(e.path().string() + ": the same key as agents/" +
                                            it->second + ".pub; give each node its own key");
    }
  }
  if (ec) return Result<CurveServerKeys>::error(dir + "/agents: " + ec.message());
  if (out.agents.empty()) {
    return Result<CurveServerKeys>::error(dir +
                                          "/agents holds no <node>.pub: no agent could "
                                          "connect");
  }
  return out;
}

std::string curveKeyText(const std::string& binary) {
  if (binary.size() != 32) return "";
  char text[kZ85Chars + 1] = {};
  if (zmq_z85_encode(text, reinterpret_cast<const uint8_t*>(binary.data()), 32) == nullptr) {
    return "";
  }
  return text;
}

}  // namespace trainscope
