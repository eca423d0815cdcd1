// Thread-safety annotations (clang's -Wthread-safety): a field says which mutex guards it
// (GUARDED_BY), a function which mutex it needs held (REQUIRES) or must not hold (EXCLUDES),
// and the compiler checks every access. GCC ignores them (the macros are empty there), so the
// check runs in the clang builds (build-asan, build-tsan). Mutex and MutexLock are std::mutex
// and std::lock_guard with the annotations libstdc++'s own types lack; UniqueLock and CondVar
// stand for std::unique_lock and std::condition_variable. Any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define TRAINSCOPE_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define TRAINSCOPE_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) TRAINSCOPE_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY TRAINSCOPE_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) TRAINSCOPE_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) TRAINSCOPE_THREAD_ANNOTATION(pt_guarded_by(x))
#define REQUIRES(...) TRAINSCOPE_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) TRAINSCOPE_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) TRAINSCOPE_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) TRAINSCOPE_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) TRAINSCOPE_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define RETURN_CAPABILITY(x) TRAINSCOPE_THREAD_ANNOTATION(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS TRAINSCOPE_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace trainscope {

// std::mutex, annotated as a capability.
class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  // NOLINTNEXTLINE(readability-identifier-naming): the name std::unique_lock and friends call
  bool try_lock() TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  std::mutex mu_;
};

// std::lock_guard for Mutex: holds it for its scope.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->lock(); }
  ~MutexLock() RELEASE() { mu_->unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* mu_;
};

// std::unique_lock for Mutex: held from construction to destruction, except between an unlock()
// and the next lock(); CondVar waits on it. The analysis follows unlock() and lock().
class SCOPED_CAPABILITY UniqueLock {
 public:
  explicit UniqueLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->lock(); }
  ~UniqueLock() RELEASE() {
    if (held_) mu_->unlock();
  }
  UniqueLock(const UniqueLock&) = delete;
  UniqueLock& operator=(const UniqueLock&) = delete;

  void lock() ACQUIRE() {
    mu_->lock();
    held_ = true;
  }
  void unlock() RELEASE() {
    held_ = false;
    mu_->unlock();
  }

 private:
  friend class CondVar;
  Mutex* mu_;
  bool held_ = true;
};

// std::condition_variable for Mutex. There is no predicate overload on purpose: the analysis
// cannot see that a predicate lambda runs with the lock held, so callers loop
// (`while (!ready_) cv_.wait(lock);`) and the condition reads guarded fields in plain sight.
// Each wait returns with the lock held again.
class CondVar {
 public:
  void wait(UniqueLock& lock) { cv_.wait(*lock.mu_); }
  // False when the time ran out (std::cv_status::timeout).
  template <typename Rep, typename Period>
  bool waitFor(UniqueLock& lock, std::chrono::duration<Rep, Period> timeout) {
    return cv_.wait_for(*lock.mu_, timeout) == std::cv_status::no_timeout;
  }
  template <typename Clock, typename Duration>
  bool waitUntil(UniqueLock& lock, std::chrono::time_point<Clock, Duration> deadline) {
    return cv_.wait_until(*lock.mu_, deadline) == std::cv_status::no_timeout;
  }
  void notifyOne() { cv_.notify_one(); }
  void notifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable_any cv_;
};

}  // namespace trainscope
