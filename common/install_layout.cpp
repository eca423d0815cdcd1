#include "common/install_layout.h"

#include <unistd.h>

#include <filesystem>
#include <system_error>

namespace trainscope {
namespace fs = std::filesystem;

std::string executableDir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec || exe.empty()) return "";
  return exe.parent_path().string();
}

std::string prefixOf(const std::string& exeDir, const std::string& bindir) {
  const fs::path bin = fs::path(bindir).lexically_normal();
  if (bin.is_absolute() || bin.empty() || exeDir.empty()) return "";
  fs::path dir = fs::path(exeDir).lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path();  // a trailing '/'
  std::vector<std::string> parts;
  for (const auto& p : bin) {
    if (!p.empty() && p != ".") parts.push_back(p.string());
  }
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    if (dir.filename() != *it) return "";
    dir = dir.parent_path();
  }
  return dir.string();
}

bool isInside(const std::string& dir, const std::string& root) {
  if (dir.empty() || root.empty()) return false;
  const fs::path d = fs::path(dir).lexically_normal();
  const fs::path r = fs::path(root).lexically_normal();
  const fs::path rel = d.lexically_relative(r);
  return !rel.empty() && *rel.begin() != "..";
}

std::string underPrefix(const std::string& prefix, const std::string& dir) {
  const fs::path d(dir);
  if (d.is_absolute()) return d.lexically_normal().string();
  return (fs::path(prefix) / d).lexically_normal().string();
}

std::vector<std::string> installedCandidates(const std::string& exeDir, const std::string& bindir,
                                             const std::string& configuredPrefix,
                                             const std::string& dir, const std::string& name) {
  std::vector<std::string> out;
  auto add = [&](const std::string& prefix) {
    if (prefix.empty()) return;
    std::string path = underPrefix(prefix, dir);
    if (!name.empty()) path = (fs::path(path) / name).string();
    for (const auto& seen : out) {
      if (seen == path) return;
    }
    out.push_back(path);
  };
  add(prefixOf(exeDir, bindir));
  add(configuredPrefix);
  return out;
}

}  // namespace trainscope
