// ThreadSanitizer support for Debian's prebuilt absl::Mutex (TSan builds
// only; see tests/stress/CMakeLists.txt).
//
// libabsl is not built with -fsanitize=thread, so TSan does not see
// absl::Mutex's lock and unlock (plain atomics and futexes inside the shared
// library) and would report every access guarded by one as a race. This file
// defines absl::Mutex's (and CondVar's) locking and waiting methods in the
// test executable, which take precedence over the library's definitions for
// every call from our code. Each forwards to the library's function (dlsym
// RTLD_NEXT) and tells TSan about the happens-before edge the mutex
// provides (readers are treated as writers: no false reports, at worst a
// missed reader/reader-only race). Nothing else changes. A method used by
// core that is not wrapped here shows up as a TSan report on data that
// mutex guards; add it below (`nm -D libabsl_synchronization.so`).
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/synchronization/mutex.h"

namespace {

#define TENSORD_STR2(x) #x
#define TENSORD_STR(x) TENSORD_STR2(x)

// The library's definition of absl::<inline ns>::<rest> (Itanium mangling;
// `rest` is the mangled tail after the namespaces, as `nm -D` shows it).
void* Next(const char* rest) {
  const std::string ns = TENSORD_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string name =
      "_ZN4absl" + std::to_string(ns.size()) + ns + std::string(rest);
  void* fn = dlsym(RTLD_NEXT, name.c_str());
  if (fn == nullptr) {
    std::fprintf(stderr, "tsan_absl_mutex: %s not found\n", name.c_str());
    std::abort();
  }
  return fn;
}

template <typename Fn>
Fn NextAs(const char* rest) {
  return reinterpret_cast<Fn>(Next(rest));
}

// absl's own deadlock detector keeps a graph of mutexes under an internal
// spinlock TSan cannot see either; it is a debugging aid, off here.
const bool kDeadlockDetectionOff = [] {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return true;
}();

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

// Acquiring: the edge is taken after the library's call returns.
void Mutex::Lock() {
  static const auto next = NextAs<void (*)(Mutex*)>("5Mutex4LockEv");
  next(this);
  __tsan_acquire(this);
}
void Mutex::ReaderLock() {
  static const auto next = NextAs<void (*)(Mutex*)>("5Mutex10ReaderLockEv");
  next(this);
  __tsan_acquire(this);
}
bool Mutex::TryLock() {
  static const auto next = NextAs<bool (*)(Mutex*)>("5Mutex7TryLockEv");
  const bool locked = next(this);
  if (locked) __tsan_acquire(this);
  return locked;
}
bool Mutex::ReaderTryLock() {
  static const auto next = NextAs<bool (*)(Mutex*)>("5Mutex13ReaderTryLockEv");
  const bool locked = next(this);
  if (locked) __tsan_acquire(this);
  return locked;
}
void Mutex::LockWhen(const Condition& cond) {
  static const auto next = NextAs<void (*)(Mutex*, const Condition&)>(
      "5Mutex8LockWhenERKNS0_9ConditionE");
  next(this, cond);
  __tsan_acquire(this);
}
bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  static const auto next = NextAs<bool (*)(Mutex*, const Condition&, Duration)>(
      "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const bool r = next(this, cond, timeout);
  __tsan_acquire(this);
  return r;
}

// Releasing: the edge is published before the library's call.
void Mutex::Unlock() {
  static const auto next = NextAs<void (*)(Mutex*)>("5Mutex6UnlockEv");
  __tsan_release(this);
  next(this);
}
void Mutex::ReaderUnlock() {
  static const auto next = NextAs<void (*)(Mutex*)>("5Mutex12ReaderUnlockEv");
  __tsan_release(this);
  next(this);
}

// Waiting releases the mutex and takes it again.
void Mutex::Await(const Condition& cond) {
  static const auto next = NextAs<void (*)(Mutex*, const Condition&)>(
      "5Mutex5AwaitERKNS0_9ConditionE");
  __tsan_release(this);
  next(this, cond);
  __tsan_acquire(this);
}
bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  static const auto next = NextAs<bool (*)(Mutex*, const Condition&, Duration)>(
      "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  __tsan_release(this);
  const bool r = next(this, cond, timeout);
  __tsan_acquire(this);
  return r;
}
bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  static const auto next = NextAs<bool (*)(Mutex*, const Condition&, Time)>(
      "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  __tsan_release(this);
  const bool r = next(this, cond, deadline);
  __tsan_acquire(this);
  return r;
}
void CondVar::Wait(Mutex* mu) {
  static const auto next =
      NextAs<void (*)(CondVar*, Mutex*)>("7CondVar4WaitEPNS0_5MutexE");
  __tsan_release(mu);
  next(this, mu);
  __tsan_acquire(mu);
}
bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  static const auto next = NextAs<bool (*)(CondVar*, Mutex*, Duration)>(
      "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  __tsan_release(mu);
  const bool r = next(this, mu, timeout);
  __tsan_acquire(mu);
  return r;
}

ABSL_NAMESPACE_END
}  // namespace absl
