// A lock-free single-producer/single-consumer ring of Records. The producer is the one
// training thread that owns the ring; the consumer is the probe runtime thread. Full ring:
// the record is dropped and counted, never waited for.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "agent/probe/record.h"

namespace trainscope::probe {

// NOLINTNEXTLINE(clang-analyzer-optin.performance.Padding): head and tail own a cache line each
class Ring {
 public:
  // `capacity` must be a power of two (callers round up).
  explicit Ring(uint32_t capacity)
      : mask_(capacity - 1), buf_(new Record[capacity]) {}  // uninitialized: pages fault in lazily

  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

  uint32_t capacity() const { return static_cast<uint32_t>(mask_ + 1); }

  // Producer only. Returns a slot to fill, or nullptr when full (the drop is counted).
  Record* claim() {
    const uint64_t head = head_.load(std::memory_order_relaxed);
    if (head - cachedTail_ > mask_) {
      cachedTail_ = tail_.load(std::memory_order_acquire);
      if (head - cachedTail_ > mask_) {
        // Only this thread writes dropped_; a plain read-modify-store keeps it lock-free.
        dropped_.store(dropped_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        return nullptr;
      }
    }
    // The next slot was last read by the consumer on another core; asking for it now, in
    // write mode, moves that cache-line transfer off the next record's critical path.
    __builtin_prefetch(&buf_[(head + 1) & mask_], 1, 3);
    return &buf_[head & mask_];
  }
  // Producer only: makes the slot returned by claim() visible to the consumer.
  void publish() {
    head_.store(head_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
  bool push(const Record& r) {
    Record* slot = claim();
    if (slot == nullptr) return false;
    *slot = r;
    publish();
    return true;
  }

  // Consumer only: calls fn(const Record&) for every published record, oldest first, and
  // frees their slots. Returns how many were taken.
  template <typename Fn>
  size_t drain(Fn&& fn) {
    const uint64_t tail = tail_.load(std::memory_order_relaxed);
    const uint64_t head = head_.load(std::memory_order_acquire);
    for (uint64_t i = tail; i != head; ++i) fn(buf_[i & mask_]);
    tail_.store(head, std::memory_order_release);
    return static_cast<size_t>(head - tail);
  }

  // Any thread: records dropped because the ring was full.
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  const uint64_t mask_;
  std::unique_ptr<Record[]> buf_;
  alignas(64) std::atomic<uint64_t> head_{0};  // written by the producer
  uint64_t cachedTail_ = 0;                    // producer's copy of tail_
  std::atomic<uint64_t> dropped_{0};           // written by the producer
  alignas(64) std::atomic<uint64_t> tail_{0};  // written by the consumer
};

// Rounds up to a power of two in [64, 1<<24].
inline uint32_t ringCapacityFor(uint32_t requested) {
  uint32_t c = 64;
  while (c < requested && c < (1u << 24)) c <<= 1;
  return c;
}

}  // namespace trainscope::probe
