// Robust statistics and the "own baseline + persistence" tracker shared by the detectors.
// Pure values; an instance belongs to one detector and is used from its caller's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collector/detect/options.h"

namespace trainscope::detect {

// Median of the values (a copy is partially sorted). 0 for an empty input.
double median(std::vector<double> values);
// The same on the caller's buffer, which it reorders: no copy, for scratch vectors.
double medianInPlace(std::vector<double>& values);
// For each value, the median of the other values (one sort, not n medians): a unit's peers.
// Needs at least two values (an empty result otherwise).
std::vector<double> mediansOfOthers(const std::vector<double>& values);
// Median absolute deviation around `center`; multiply by 1.4826 for a Gaussian sigma.
double mad(const std::vector<double>& values, double center);
inline constexpr double kMadToSigma = 1.4826;

// Where a piecewise-constant fit with one break fits best: the index of the first value of
// the second segment, in [1, n-1] (least squares, i.e. maximal i(n-i)/n * (mean2-mean1)^2).
// `rising` > 0 only accepts splits where the second segment is higher, < 0 lower, 0 either.
// Returns 0 when no split qualifies (n < 2).
size_t bestSplit(const std::vector<double>& values, int rising);

// Fixed-capacity ring; index 0 is the oldest element.
template <typename T>
class Ring {
 public:
  explicit Ring(size_t capacity = 1) : buf_(capacity == 0 ? 1 : capacity) {}
  // Index arithmetic by compare-and-subtract, not %: a division per access was a visible
  // share of the per-sample cost of the trackers.
  void push(const T& v) {
    buf_[wrap(head_ + size_)] = v;
    if (size_ < buf_.size()) {
      ++size_;
    } else {
      head_ = wrap(head_ + 1);
    }
  }
  size_t size() const { return size_; }
  size_t capacity() const { return buf_.size(); }
  bool full() const { return size_ == buf_.size(); }
  bool empty() const { return size_ == 0; }
  const T& operator[](size_t i) const { return buf_[wrap(head_ + i)]; }
  const T& front() const { return (*this)[0]; }
  const T& back() const { return (*this)[size_ - 1]; }
  // Where the next push writes (a hint for prefetching).
  const T* nextSlot() const { return &buf_[wrap(head_ + (size_ < buf_.size() ? size_ : 0))]; }
  void clear() { head_ = size_ = 0; }
  // The newest `n` values (all of them when fewer are held), oldest first.
  std::vector<T> latest(size_t n) const {
    const size_t k = n < size_ ? n : size_;
    std::vector<T> out;
    out.reserve(k);
    for (size_t i = size_ - k; i < size_; ++i) out.push_back((*this)[i]);
    return out;
  }
  std::vector<T> values() const {
    std::vector<T> out;
    out.reserve(size_);
    for (size_t i = 0; i < size_; ++i) out.push_back((*this)[i]);
    return out;
  }

 private:
  size_t wrap(size_t i) const { return i >= buf_.size() ? i - buf_.size() : i; }  // i < 2 cap
  std::vector<T> buf_;
  size_t head_ = 0;
  size_t size_ = 0;
};

// Detects a sustained rise of one series against its own robust baseline (or a fixed one)
// with a one-sided CUSUM on the standardised excess over minExcess (see PersistenceOptions):
// opens when the CUSUM reaches cusumH; resolves when at most releaseCount of the last `window`
// samples exceed and their median is within minExcess/2 of the baseline. Onset and resolution
// steps are estimated with a least-squares split of the recent history, not taken as the step
// the decision was made.
class PersistenceTracker {
 public:
  enum class Transition { kNone, kOpened, kResolved };

  // fixedBaseline > 0: compare against that value (e.g. 1.0 for a ratio to peers) and take
  // the noise from setExternalNoise instead of learning both.
  explicit PersistenceTracker(const PersistenceOptions& options, double fixedBaseline = 0.0);

  Transition push(int64_t step, double value);
  // Asks the CPU to fetch what the next push touches, for a caller about to push into many
  // trackers in turn. No effect on results.
  void prefetch() const { __builtin_prefetch(hist_.nextSlot(), 1); }

  // Relative sigma used when the baseline is fixed (e.g. the job-wide spread of ratios).
  void setExternalNoise(double relSigma) { externalNoise_ = relSigma; }
  // Leaves the open episode without an event; the window is kept, so a condition that still
  // holds reopens on the next push (used when a job-wide anomaly covered this series).
  void forgetEpisode() { active_ = false; }

  bool active() const { return active_; }
  bool ready() const;                      // a baseline is known
  double baseline() const;                 // level compared against
  double relSigma() const;                 // robust relative sigma of the baseline
  double exceedLevel() const;              // baseline * (1 + max(minExcess, noiseSigmas*relSigma))
  int exceedCount() const;                 // exceeding samples in the window
  double cusum() const { return cusum_; }  // the CUSUM statistic now (sigmas)
  bool rising() const { return cusum_ > 0.0; }  // an excursion above minExcess is under way
  int64_t onsetStep() const { return onsetStep_; }
  int64_t resolvedStep() const { return resolvedStep_; }
  double level() const;  // median of recent samples at/after the onset
  double lastValue() const { return hist_.empty() ? 0.0 : hist_.back().value; }
  double confidence() const;  // 0..1 from how far past cusumH the statistic is

 private:
  void refreshBaseline() const;
  bool excursionAbove(double level) const;

  PersistenceOptions o_;
  double fixedBaseline_;
  double externalNoise_ = 0.0;
  int64_t seen_ = 0;
  // Stored as float (relative precision 1e-7, far below any noise judged): half the memory
  // per tracker, and a 1,024-rank job has ~25,000 of them, so fewer cache misses per sample.
  Ring<float> base_;
  // The last 2 x window samples in one ring (one cache line per few samples, not five
  // rings); the last `window` of them are the recent window, kept out of the baseline; the
  // older ones join it a window at a time (see push).
  struct Sample {
    int64_t step;
    float value;
    bool exceeds;  // above exceedLevel() when pushed
  };
  std::vector<double> recentValues() const;
  Ring<Sample> hist_;
  size_t window_;
  size_t sinceBatch_ = 0;  // pushes since samples last joined the baseline
  double cusum_ = 0.0;
  double lowCusum_ = 0.0;     // the same test downwards (baseline admission only)
  int64_t cusumStart_ = -1;   // first step of the current CUSUM excursion
  int64_t firstJudged_ = -1;  // first step judged (the history holds nothing before it)
  int sinceOpen_ = 0;         // samples since the episode opened
  bool active_ = false;
  int64_t onsetStep_ = -1;
  int64_t resolvedStep_ = -1;
  mutable bool dirty_ = true;
  mutable double baseMedian_ = 0.0;
  mutable double baseRelSigma_ = 0.0;
  mutable int sinceRefresh_ = 0;
};

}  // namespace trainscope::detect
