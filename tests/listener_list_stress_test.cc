// The listener list: removing a listener waits for emitters still running it on other
// threads, so whatever the listener captured can be destroyed right after; a listener
// may still remove itself (or others) from inside its own call.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "bulwark/circuit_breaker.h"
#include "bulwark/metrics.h"
#include "support/patience.h"

namespace bulwark {
namespace {

using namespace std::chrono_literals;

// Spins (yielding) until `flag` is set, for at most 120 s (only a hang takes that
// long); returns the flag.
bool await(const std::atomic<bool>& flag) {
  const test::Patience patience;
  while (!flag.load() && !patience.exhausted()) std::this_thread::yield();
  return flag.load();
}

// Yields up to `rounds` times, for at most 100 ms, unless `flag` is set first; returns
// the flag. A look for something that must not happen: it holds however long it lasts.
bool glance(const std::atomic<bool>& flag, long rounds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  for (long i = 0; i < rounds && !flag.load() && std::chrono::steady_clock::now() < end; ++i)
    std::this_thread::yield();
  return flag.load();
}

TEST(ListenerList, RemoveWaitsForAnEmitterStillRunningTheListener) {
  detail::ListenerList<int> list;
  std::atomic<bool> inside{false}, release{false}, finished{false};
  const ListenerId id = list.add([&](const int&) {
    inside.store(true);
    await(release);
    finished.store(true);
  });
  std::thread emitter([&] { list.emit(1); });
  ASSERT_TRUE(await(inside));

  std::atomic<bool> removed{false};
  bool finished_when_removed = false;
  std::thread remover([&] {
    EXPECT_TRUE(list.remove(id));
    finished_when_removed = finished.load();
    removed.store(true);
  });
  // While the listener runs, remove() must not return. (A bounded look: it holds as
  // long as we wait; the decisive check is what the remover saw when it returned.)
  EXPECT_FALSE(glance(removed, 20'000)) << "remove() returned while the listener still ran";
  release.store(true);
  remover.join();
  emitter.join();
  EXPECT_TRUE(finished_when_removed)
      << "remove() returned before the emitter left the listener: its captures could "
         "already be destroyed";
}

TEST(ListenerList, AListenerMayRemoveItselfAndOthersWhileRunning) {
  detail::ListenerList<int> list;
  int self_calls = 0, other_calls = 0;
  ListenerId self = 0;
  const ListenerId other = list.add([&](const int&) { ++other_calls; });
  self = list.add([&](const int&) {
    ++self_calls;
    EXPECT_TRUE(list.remove(self));  // does not wait for its own thread
    EXPECT_TRUE(list.remove(other));
  });
  list.emit(1);
  list.emit(1);
  EXPECT_EQ(self_calls, 1);
  EXPECT_EQ(other_calls, 1);  // ran before `self` in this emit, gone for the next
  EXPECT_TRUE(list.empty());
}

// The case that crashed: metrics tracking a breaker, destroyed on one thread while
// another thread's call opens the breaker and runs the metrics' listener.
TEST(ListenerList, MetricsCanBeDestroyedRightAfterTheirListenerIsRemoved) {
  constexpr int kRounds = 200;
  for (int round = 0; round < kRounds; ++round) {
    BreakerPolicy<SteadyClock> policy(BreakerConfig{.consecutive_failures = 1});
    BasicCircuitBreaker<SteadyClock> breaker(policy);
    auto metrics = std::make_unique<BreakerMetrics>();
    const ListenerId id = metrics->track(policy, &breaker);
    std::thread caller([&] {
      for (int i = 0; i < 4; ++i) {
        breaker.try_acquire()->record_failure();  // opens
        breaker.reset();
      }
    });
    ASSERT_TRUE(policy.remove_listener(id));
    metrics.reset();  // ASan: no listener may still be inside it
    caller.join();
  }
}

}  // namespace
}  // namespace bulwark
