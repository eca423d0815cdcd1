#include "tools/bench/offline_detect_eval/cpd_score.h"

#include <algorithm>
#include <cstdlib>
#include <set>

namespace trainscope::bench {

namespace {

std::set<size_t> withStart(const ChangePoints& points) {
  std::set<size_t> out(points.begin(), points.end());
  out.insert(0);
  return out;
}

size_t distance(size_t a, size_t b) {
  return a > b ? a - b : b - a;
}

}  // namespace

ChangePoints truePositives(const ChangePoints& annotations, const ChangePoints& predictions,
                           size_t margin) {
  std::set<size_t> free(predictions.begin(), predictions.end());
  std::set<size_t> taus(annotations.begin(), annotations.end());
  ChangePoints hit;
  for (size_t tau : taus) {
    // The closest free prediction within the margin; the smaller one on a tie (the set is
    // ascending, so the first of equals is kept).
    auto best = free.end();
    for (auto it = free.lower_bound(tau >= margin ? tau - margin : 0);
         it != free.end() && *it <= tau + margin; ++it) {
      if (best == free.end() || distance(*it, tau) < distance(*best, tau)) best = it;
    }
    if (best == free.end()) continue;
    hit.push_back(tau);
    free.erase(best);
  }
  return hit;
}

F1Score f1Score(const std::vector<ChangePoints>& annotators, const ChangePoints& predictions,
                size_t margin) {
  F1Score s;
  if (annotators.empty()) return s;
  const std::set<size_t> x = withStart(predictions);
  const ChangePoints xs(x.begin(), x.end());
  std::set<size_t> all;
  double recall = 0.0;
  for (const ChangePoints& a : annotators) {
    const std::set<size_t> tk = withStart(a);
    all.insert(tk.begin(), tk.end());
    const ChangePoints tks(tk.begin(), tk.end());
    recall += static_cast<double>(truePositives(tks, xs, margin).size()) /
              static_cast<double>(tks.size());
  }
  s.recall = recall / static_cast<double>(annotators.size());
  const ChangePoints allv(all.begin(), all.end());
  s.precision =
      static_cast<double>(truePositives(allv, xs, margin).size()) / static_cast<double>(xs.size());
  s.f1 =
      s.precision + s.recall > 0.0 ? 2.0 * s.precision * s.recall / (s.precision + s.recall) : 0.0;
  return s;
}

}  // namespace trainscope::bench
