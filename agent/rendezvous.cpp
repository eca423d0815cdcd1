#include "agent/rendezvous.h"

namespace trainscope::agent {
namespace {

// FNV-1a over the bytes, then a 64-bit finalizer (MurmurHash3's fmix64): FNV alone leaves
// similar keys ("job-1", "job-2") with similar high bits, which would bias the comparison.
uint64_t fnv1a(uint64_t h, std::string_view bytes) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

uint64_t fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

}  // namespace

uint64_t rendezvousWeight(std::string_view key, std::string_view collector) {
  uint64_t h = fnv1a(0xcbf29ce484222325ULL, collector);
  h = fnv1a(h ^ 0xff, key);  // a separator: ("ab", "c") and ("a", "bc") differ
  return fmix64(h ^ (collector.size() << 32) ^ key.size());
}

size_t rendezvousOwner(std::string_view key, const std::vector<std::string>& collectors,
                       const std::vector<bool>& up) {
  size_t best = collectors.size();
  uint64_t bestWeight = 0;
  for (size_t i = 0; i < collectors.size(); ++i) {
    if (!up.empty() && !up[i]) continue;
    const uint64_t w = rendezvousWeight(key, collectors[i]);
    if (best == collectors.size() || w > bestWeight) {
      best = i;
      bestWeight = w;
    }
  }
  return best;
}

}  // namespace trainscope::agent
