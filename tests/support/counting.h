// Counts the allocations and mutex locks made by a piece of code, so that "allocates
// nothing, takes no lock" is a checked claim:
//
//   const auto c = bulwark::testing::count([&] { breaker.try_acquire()->record_success(); });
//   EXPECT_EQ(c.allocations, 0u);
//   if (bulwark::testing::kCountsLocks) EXPECT_EQ(c.locks, 0u);
//
// Include it in exactly one file of a test executable: it replaces the global operator
// new/delete and interposes pthread_mutex_lock (what std::mutex uses) for the whole
// binary. Counting is per thread and only inside count(), so gtest's own allocations
// and other threads don't disturb it. ThreadSanitizer owns pthread_mutex_lock, so under
// TSan locks are not counted (kCountsLocks is false); allocations always are.

#ifndef BULWARK_TESTS_SUPPORT_COUNTING_H_
#define BULWARK_TESTS_SUPPORT_COUNTING_H_

#include <dlfcn.h>
#include <pthread.h>

#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <new>

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
  std::size_t locks = 0;
};

namespace detail {
inline thread_local bool counting = false;
inline thread_local Counts counts;

inline void* counted(std::size_t n) {
  if (counting) ++counts.allocations;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
inline void* counted_aligned(std::size_t n, std::align_val_t a) {
  if (counting) ++counts.allocations;
  const auto align = static_cast<std::size_t>(a);
  if (void* p = std::aligned_alloc(align, (n + align - 1) / align * align)) return p;
  throw std::bad_alloc();
}
}  // namespace detail

// Runs `f` and returns the allocations and locks it made on this thread.
template <class F>
Counts count(F&& f) {
  detail::counts = {};
  detail::counting = true;
  f();
  detail::counting = false;
  return detail::counts;
}

// True if the counting itself works in this binary (a lock and an allocation are seen).
inline bool counting_works() {
  std::mutex m;
  const Counts c = count([&] {
    int* volatile escaped = new int(1);  // volatile: the pair can't be elided
    delete escaped;
    m.lock();
    m.unlock();
  });
  return c.allocations == 1 && (!kCountsLocks || c.locks == 1);
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
using LockFn = int (*)(pthread_mutex_t*);
inline LockFn real_lock() {
  static const LockFn fn = reinterpret_cast<LockFn>(dlsym(RTLD_NEXT, "pthread_mutex_lock"));
  return fn;
}
inline const LockFn resolved_early = real_lock();  // before anything counts
}  // namespace bulwark::testing::detail

// Every std::mutex::lock in the binary comes through here.
extern "C" int pthread_mutex_lock(pthread_mutex_t* m) {
  if (bulwark::testing::detail::counting) ++bulwark::testing::detail::counts.locks;
  return bulwark::testing::detail::real_lock()(m);
}
#endif

#endif  // BULWARK_TESTS_SUPPORT_COUNTING_H_
