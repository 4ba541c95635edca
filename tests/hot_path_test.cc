// The call path of a CLOSED breaker takes no lock and allocates nothing; neither do
// rejections. Proven by counting: this test replaces the global operator new and
// interposes pthread_mutex_lock (which std::mutex uses), then drives the paths.

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>

#include "bulwark/circuit_breaker.h"

namespace {
std::atomic<long> g_allocations{0};
std::atomic<long> g_mutex_locks{0};
}  // namespace

// GCC flags free() in a replaced operator delete as mismatched; a replacement pair
// built on malloc/free is exactly what the standard allows.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

// Sanitizers intercept pthread_mutex_lock themselves; only interpose without them.
#if !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define BULWARK_COUNT_LOCKS 1
extern "C" int pthread_mutex_lock(pthread_mutex_t* m) {
  using Fn = int (*)(pthread_mutex_t*);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "pthread_mutex_lock"));
  g_mutex_locks.fetch_add(1, std::memory_order_relaxed);
  return real(m);
}
#endif

namespace bulwark {
namespace {

using namespace std::chrono_literals;

struct Counts {
  long allocations, locks;
};
Counts counts() { return {g_allocations.load(), g_mutex_locks.load()}; }

class HotPath : public ::testing::Test {
 protected:
  void SetUp() override {
#if defined(BULWARK_COUNT_LOCKS)
    // The counter itself must work: a std::mutex lock is seen.
    std::mutex m;
    const long before = g_mutex_locks.load();
    m.lock();
    m.unlock();
    ASSERT_EQ(g_mutex_locks.load(), before + 1) << "pthread_mutex_lock interposition is not active";
#endif
    const long before_new = g_allocations.load();
    int* volatile escaped = new int(1);  // volatile: the pair can't be elided
    delete escaped;
    ASSERT_EQ(g_allocations.load(), before_new + 1) << "operator new replacement is not active";
  }

  void expect_none_since(Counts before, const char* what) {
    const Counts after = counts();
    EXPECT_EQ(after.allocations, before.allocations) << what << " allocated";
#if defined(BULWARK_COUNT_LOCKS)
    EXPECT_EQ(after.locks, before.locks) << what << " took a lock";
#endif
  }

  ManualClock clock;
};

TEST_F(HotPath, ClosedCallsNeitherLockNorAllocate) {
  BreakerPolicy<ManualClock> policy({.consecutive_failures = 1000}, clock);
  policy.on_transition([](const TransitionEvent&) {});  // listeners must not matter
  BasicCircuitBreaker<ManualClock> b(policy);
  const Counts before = counts();
  for (int i = 0; i < 10'000; ++i) {
    auto p = b.try_acquire();
    switch (i % 4) {
      case 0:
        p->record_success();
        break;
      case 1:
        p->record_failure();
        break;
      case 2:
        p->ignore();
        break;
      default:
        break;  // cancelled
    }
  }
  auto r = b.execute([] { return 7; });
  expect_none_since(before, "the closed path");
  EXPECT_EQ(*r, 7);
  EXPECT_EQ(b.state(), State::closed);
}

// Closed calls of a windowed breaker that judges slowness and counts calls in flight;
// returns the allocations and locks made by the calls alone (not by construction).
template <class Window>
Counts windowed_closed_calls(ManualClock& clock) {
  BasicCircuitBreaker<ManualClock, Window> b({.consecutive_failures = 0,
                                              .failure_rate = 0.9,
                                              .slow_call_rate = 0.9,
                                              .slow_call_duration = 100ms,
                                              .minimum_calls = 10,
                                              .window_size = 50,
                                              .window_length = 10s},
                                             clock);
  const Counts before = counts();
  for (int i = 0; i < 10'000; ++i) {  // crosses many buckets and in-flight epochs
    auto p = b.try_acquire();
    clock.advance(7ms);
    switch (i % 5) {
      case 0:
        p->record_failure();
        break;
      case 1:
        p->ignore();
        break;
      case 2:
        break;  // cancelled
      default:
        p->record_success(i % 10 == 3 ? 200ms : 1ms);
        break;
    }
  }
  (void)b.snapshot();
  const Counts after = counts();
  EXPECT_EQ(b.state(), State::closed);
  return {after.allocations - before.allocations, after.locks - before.locks};
}

TEST_F(HotPath, WindowedClosedCallsNeitherLockNorAllocate) {
  for (const Counts c :
       {windowed_closed_calls<TimeWindow<10>>(clock), windowed_closed_calls<CountWindow>(clock)}) {
    EXPECT_EQ(c.allocations, 0) << "a windowed call allocated";
#if defined(BULWARK_COUNT_LOCKS)
    EXPECT_EQ(c.locks, 0) << "a windowed call took a lock";
#endif
  }
}

TEST_F(HotPath, RejectionsNeitherLockNorAllocate) {
  BasicCircuitBreaker<ManualClock> b(
      {.consecutive_failures = 1, .open_duration = 1h, .half_open_max_calls = 1}, clock);
  b.try_acquire()->record_failure();
  Counts before = counts();
  for (int i = 0; i < 1000; ++i) ASSERT_FALSE(b.try_acquire());
  expect_none_since(before, "an OPEN rejection");

  clock.advance(1h);
  auto probe = b.try_acquire();
  ASSERT_TRUE(probe);
  before = counts();
  for (int i = 0; i < 1000; ++i) ASSERT_FALSE(b.try_acquire());
  expect_none_since(before, "a HALF_OPEN rejection");
}

}  // namespace
}  // namespace bulwark
