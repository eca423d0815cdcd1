#include "agent/probe/intern.h"

#include <deque>
#include <unordered_map>

#include "common/thread_annotations.h"

namespace trainscope::probe {
namespace {

struct InternTable {
  Mutex mu;
  std::deque<std::string> strings GUARDED_BY(mu);                     // a deque keeps c_str stable
  std::unordered_map<std::string_view, uint32_t> ids GUARDED_BY(mu);  // views into `strings`
};

// Leaked on purpose: names stay valid while static destructors and atexit handlers run.
InternTable& table() {
  static auto* t = new InternTable();
  return *t;
}

}  // namespace

uint32_t internName(std::string_view name) {
  if (name.empty()) return 0;
  InternTable& t = table();
  MutexLock lock(&t.mu);
  auto it = t.ids.find(name);
  if (it != t.ids.end()) return it->second;
  t.strings.emplace_back(name);
  const auto id = static_cast<uint32_t>(t.strings.size());
  t.ids.emplace(std::string_view(t.strings.back()), id);
  return id;
}

const char* nameString(uint32_t id) {
  if (id == 0) return "";
  InternTable& t = table();
  MutexLock lock(&t.mu);
  if (id > t.strings.size()) return "";
  return t.strings[id - 1].c_str();
}

}  // namespace trainscope::probe
