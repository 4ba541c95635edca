// Counts the allocations and locks taken by a piece of code, so that "allocates
// nothing, takes no lock" is a checked claim:
//
//   const auto c = bulwark::testing::count([&] { breaker.try_acquire()->record_success(); });
//   EXPECT_EQ(c.allocations, 0u);
//   if (bulwark::testing::kCountsLocks) EXPECT_EQ(c.locks, 0u);
//
// Include it in exactly one file of a test executable: it replaces the global operator
// new/delete, interposes aligned_alloc (which Asio's recycling allocator calls for
// coroutine frames and handlers, bypassing operator new), and pthread_mutex_lock and
// pthread_mutex_trylock (what std::mutex's lock() and try_lock() use) and pthread_spin_lock /
// pthread_spin_trylock for the whole binary. `locks` counts every one of them, successful or not: a
// try-lock never waits, but it is still a lock on the path (a contended cache line, a syscall when
// it is released to a waiter); `try_locks` says how many of them were try-locks. Counting is per
// thread and only inside count(), so gtest's own allocations and other threads don't disturb it.
// ThreadSanitizer owns the pthread lock functions, so under TSan locks are not counted
// (kCountsLocks is false); allocations always are.

#ifndef BULWARK_TESTS_SUPPORT_COUNTING_H_
#define BULWARK_TESTS_SUPPORT_COUNTING_H_

#include <dlfcn.h>
#include <pthread.h>

#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <new>

#include "bulwark/detail/ledger.h"

#if defined(__SANITIZE_THREAD__)
#define BULWARK_COUNT_LOCKS 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define BULWARK_COUNT_LOCKS 0
#endif
#endif
#ifndef BULWARK_COUNT_LOCKS
#define BULWARK_COUNT_LOCKS 1
#endif

namespace bulwark::testing {

inline constexpr bool kCountsLocks = BULWARK_COUNT_LOCKS != 0;

struct Counts {
  std::size_t allocations = 0;
  std::size_t locks = 0;      // lock and try-lock calls, mutexes and spin locks
  std::size_t try_locks = 0;  // of which try-locks (never wait)
};

namespace detail {
inline thread_local bool counting = false;
inline thread_local Counts counts;

inline void* counted(std::size_t n) {
  if (counting) ++counts.allocations;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
// posix_memalign: not the interposed aligned_alloc below, which would count it again.
inline void* raw_aligned(std::size_t align, std::size_t n) noexcept {
  void* p = nullptr;
  if (align < sizeof(void*)) align = sizeof(void*);
  return posix_memalign(&p, align, n == 0 ? 1 : n) == 0 ? p : nullptr;
}
inline void* counted_aligned(std::size_t n, std::align_val_t a) {
  if (counting) ++counts.allocations;
  if (void* p = raw_aligned(static_cast<std::size_t>(a), n)) return p;
  throw std::bad_alloc();
}
}  // namespace detail

// Runs `f` and returns the allocations and locks it made on this thread. The thread's
// ledger (bulwark/detail/ledger.h: one allocation, once per thread, at its first
// counted call) is registered first: what is counted is a warm thread's path.
template <class F>
Counts count(F&& f) {
  bulwark::detail::ledger_join();
  detail::counts = {};
  detail::counting = true;
  f();
  detail::counting = false;
  return detail::counts;
}

// True if the counting itself works in this binary (an allocation, an aligned_alloc, a
// lock, a try-lock and a spin lock are seen).
inline bool counting_works() {
  std::mutex m;
  pthread_spinlock_t spin;
  pthread_spin_init(&spin, PTHREAD_PROCESS_PRIVATE);
  const Counts c = count([&] {
    int* volatile escaped = new int(1);  // volatile: the pair can't be elided
    delete escaped;
    void* volatile aligned = std::aligned_alloc(64, 64);
    std::free(aligned);
    m.lock();
    m.unlock();
    if (m.try_lock()) m.unlock();
    pthread_spin_lock(&spin);
    pthread_spin_unlock(&spin);
  });
  pthread_spin_destroy(&spin);
  return c.allocations == 2 && (!kCountsLocks || (c.locks == 3 && c.try_locks == 1));
}

}  // namespace bulwark::testing

// GCC flags free() of memory from a replaced operator new as mismatched; a replacement
// pair built on malloc/free is exactly what the standard allows.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

void* operator new(std::size_t n) { return bulwark::testing::detail::counted(n); }
void* operator new[](std::size_t n) { return bulwark::testing::detail::counted(n); }
void* operator new(std::size_t n, std::align_val_t a) {
  return bulwark::testing::detail::counted_aligned(n, a);
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return bulwark::testing::detail::counted_aligned(n, a);
}
// Asio's frames and handlers come from here (std::aligned_alloc), not operator new.
extern "C" void* aligned_alloc(std::size_t alignment, std::size_t size) noexcept {
  if (bulwark::testing::detail::counting) ++bulwark::testing::detail::counts.allocations;
  return bulwark::testing::detail::raw_aligned(alignment, size);
}

void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

#if BULWARK_COUNT_LOCKS
namespace bulwark::testing::detail {
template <class Lock>
Lock real(const char* name) {
  return reinterpret_cast<Lock>(dlsym(RTLD_NEXT, name));
}
using MutexFn = int (*)(pthread_mutex_t*);
using SpinFn = int (*)(pthread_spinlock_t*);
inline MutexFn real_lock() {
  static const MutexFn fn = real<MutexFn>("pthread_mutex_lock");
  return fn;
}
inline MutexFn real_trylock() {
  static const MutexFn fn = real<MutexFn>("pthread_mutex_trylock");
  return fn;
}
inline SpinFn real_spin_lock() {
  static const SpinFn fn = real<SpinFn>("pthread_spin_lock");
  return fn;
}
inline SpinFn real_spin_trylock() {
  static const SpinFn fn = real<SpinFn>("pthread_spin_trylock");
  return fn;
}
// Resolved before anything counts.
inline const bool resolved_early =
    real_lock() && real_trylock() && real_spin_lock() && real_spin_trylock();

inline void count_lock(bool is_try) {
  if (!counting) return;
  ++counts.locks;
  if (is_try) ++counts.try_locks;
}
}  // namespace bulwark::testing::detail

// Every std::mutex::lock / try_lock in the binary comes through here.
extern "C" int pthread_mutex_lock(pthread_mutex_t* m) {
  bulwark::testing::detail::count_lock(false);
  return bulwark::testing::detail::real_lock()(m);
}
extern "C" int pthread_mutex_trylock(pthread_mutex_t* m) {
  bulwark::testing::detail::count_lock(true);
  return bulwark::testing::detail::real_trylock()(m);
}
extern "C" int pthread_spin_lock(pthread_spinlock_t* l) {
  bulwark::testing::detail::count_lock(false);
  return bulwark::testing::detail::real_spin_lock()(l);
}
extern "C" int pthread_spin_trylock(pthread_spinlock_t* l) {
  bulwark::testing::detail::count_lock(true);
  return bulwark::testing::detail::real_spin_trylock()(l);
}
#endif

#endif  // BULWARK_TESTS_SUPPORT_COUNTING_H_
