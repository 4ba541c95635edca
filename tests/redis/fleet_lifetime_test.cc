// Lifetimes: a Fleet destroyed while breakers attached to it are in use on other threads
// and while a sync runs on another thread; a breaker detached and destroyed before its
// Fleet. What fleet.h promises: the Fleet never touches what is gone, the breakers work
// alone once their Fleet is gone. Run under ASan (use after free) and TSan (races).

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bulwark/redis/fleet.h"

namespace bulwark::redis {
namespace {

using namespace std::chrono_literals;

// The only place these tests build a breaker configuration.
CircuitBreaker::Config config(std::string name) {
  return CircuitBreaker::Config{
      .name = std::move(name), .consecutive_failures = 2, .open_duration = 1ms};
}

std::string key(int i) {
  std::string k = "k";
  k += std::to_string(i);
  return k;
}

// Polls `done` until it holds, for 30 s at most.
template <class F>
bool eventually(F done) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// A store whose exchange() waits at a gate the test opens: a sync held in the middle.
class GatedStore final : public FleetStore {
 public:
  Expected<SyncReply, StoreError> exchange(const SyncRequest& request) override {
    {
      std::unique_lock lock(mu_);
      ++entered_;
      cv_.notify_all();
      cv_.wait(lock, [this] { return open_; });
    }
    return inner_.exchange(request);
  }
  void wait_entered(int n) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return entered_ >= n; });
  }
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  MemoryFleetStore inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  int entered_ = 0;
  bool open_ = false;
};

// Breakers go on tripping and resetting on four threads (their listeners calling into
// the Fleet) while the Fleet is destroyed: the destructor waits for any listener still
// running, and afterwards the breakers work alone, keeping what they adopted.
TEST(FleetLifetimeTest, BreakersInUseOnOtherThreadsOutliveTheirFleet) {
  MemoryFleetStore store;
  constexpr int kKeys = 8;
  std::vector<std::unique_ptr<CircuitBreaker>> breakers;
  auto fleet = std::make_unique<Fleet>(
      FleetConfig{
          .instance = "a", .queue_capacity = 16, .on_queued = [](const std::string&, State) {}},
      store);
  for (int i = 0; i < kKeys; ++i) {
    breakers.push_back(std::make_unique<CircuitBreaker>(config(key(i))));
    fleet->attach(*breakers.back());
  }
  std::atomic<long> ops{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int n = 0; n < 20000; ++n) {
        CircuitBreaker& b = *breakers[static_cast<std::size_t>((n + t) % kKeys)];
        if (auto p = b.try_acquire()) {
          p->record(n % 2 == 0 ? Outcome::failure : Outcome::success);
        } else if (n % 5 == 0) {
          b.reset();
        }
        ops.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  // Destroyed once the threads are under way (however far they got: the verdict does not
  // depend on it).
  ASSERT_TRUE(eventually([&] { return ops.load() > 1000; }));
  ASSERT_TRUE(fleet->sync());
  fleet.reset();
  for (auto& th : threads) th.join();
  for (auto& b : breakers) {
    b->reset();
    for (int i = 0; i < 2; ++i) b->try_acquire()->record_failure();
    EXPECT_EQ(b->state(), State::open);
  }
}

// A breaker detached (with a transition of it still queued) and destroyed: the next
// syncs and readings skip it, its key can be attached again, and under ASan nothing
// touches the freed breaker.
TEST(FleetLifetimeTest, ABreakerDetachedAndDestroyedBeforeItsFleetIsNeverTouchedAgain) {
  MemoryFleetStore store;
  std::vector<std::string> woken;
  Fleet fleet(
      FleetConfig{.instance = "a",
                  .on_queued = [&woken](const std::string& k, State) { woken.push_back(k); }},
      store);
  CircuitBreaker stays(config("stays"));
  auto goes = std::make_unique<CircuitBreaker>(config("goes"));
  fleet.attach(stays);
  fleet.attach(*goes);
  ASSERT_TRUE(fleet.sync());
  for (int i = 0; i < 2; ++i) goes->try_acquire()->record_failure();  // queued, not synced
  ASSERT_EQ(woken.size(), 1u);
  EXPECT_TRUE(fleet.detach("goes"));
  EXPECT_FALSE(fleet.detach("goes"));
  goes.reset();
  const auto s = fleet.sync();
  ASSERT_TRUE(s);
  EXPECT_EQ(s->published, 0u);  // the detached breaker's opening is not sent
  ASSERT_EQ(fleet.reading().keys.size(), 1u);
  EXPECT_EQ(fleet.reading().keys[0].key, "stays");
  EXPECT_FALSE(fleet.reset("goes"));
  CircuitBreaker again(config("goes"));
  fleet.attach(again);
  for (int i = 0; i < 2; ++i) again.try_acquire()->record_failure();
  ASSERT_TRUE(fleet.sync());
  EXPECT_EQ(fleet.reading().keys.size(), 2u);
  EXPECT_TRUE(decode_record(store.get_raw("goes").value_or("")));
}

// Detached while another thread makes it trip and reset (its listener racing the
// detach): after detach() returns the Fleet has let go of it.
TEST(FleetLifetimeTest, DetachWhileTheBreakerMovesOnAnotherThread) {
  MemoryFleetStore store;
  Fleet fleet(FleetConfig{.instance = "a", .on_queued = [](const std::string&, State) {}}, store);
  auto moving = std::make_unique<CircuitBreaker>(config("moving"));
  fleet.attach(*moving);
  std::atomic<bool> stop{false};
  std::atomic<long> ops{0};
  std::thread mover([&] {
    while (!stop.load()) {
      if (auto p = moving->try_acquire()) {
        p->record_failure();
      } else {
        moving->reset();
      }
      ops.fetch_add(1, std::memory_order_relaxed);
    }
  });
  ASSERT_TRUE(eventually([&] { return ops.load() > 1000; }));
  ASSERT_TRUE(fleet.sync());
  EXPECT_TRUE(fleet.detach("moving"));
  ASSERT_TRUE(fleet.sync());
  stop = true;
  mover.join();
  moving.reset();
  ASSERT_TRUE(fleet.sync());
  EXPECT_TRUE(fleet.reading().keys.empty());
}

// The Fleet destroyed while a sync runs on another thread: the destructor waits for
// that sync to return. (The test opens the gate after the destructor started, or after a
// short while if it has not yet: either way nothing freed is touched.)
TEST(FleetLifetimeTest, DestroyingTheFleetWaitsForASyncRunningOnAnotherThread) {
  GatedStore store;
  CircuitBreaker breaker(config("inventory"));
  auto fleet = std::make_unique<Fleet>(FleetConfig{.instance = "a"}, store);
  fleet->attach(breaker);
  for (int i = 0; i < 2; ++i) breaker.try_acquire()->record_failure();
  Expected<SyncSummary, StoreError> result =
      Unexpected(StoreError{StoreError::Kind::unavailable, "not run"});
  std::thread sync([&] { result = fleet->sync(); });
  store.wait_entered(1);
  std::atomic<bool> destroyed{false};
  std::thread destroy([&] {
    fleet.reset();
    destroyed = true;
  });
  const auto until = std::chrono::steady_clock::now() + 100ms;
  while (!destroyed.load() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  store.open();
  sync.join();
  destroy.join();
  ASSERT_TRUE(result) << result.error().message;
  EXPECT_EQ(result->published, 1u);
  // The breaker, its Fleet gone, works alone.
  EXPECT_EQ(breaker.state(), State::open);
  breaker.reset();
  EXPECT_TRUE(breaker.try_acquire());
}

// attach(), detach(), reset(key) and sync() from different threads at once: they
// serialise (TSan checks the Fleet's state against each other).
TEST(FleetLifetimeTest, AttachDetachResetAndSyncFromSeveralThreads) {
  MemoryFleetStore store;
  Fleet fleet(FleetConfig{.instance = "a"}, store);
  constexpr int kKeys = 32;
  std::vector<std::unique_ptr<CircuitBreaker>> breakers;
  for (int i = 0; i < kKeys; ++i)
    breakers.push_back(std::make_unique<CircuitBreaker>(config(key(i))));
  std::atomic<bool> done{false};
  std::thread syncer([&] {
    while (!done.load()) (void)fleet.sync();
  });
  std::thread reader([&] {
    while (!done.load()) (void)fleet.reading();
  });
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < kKeys; ++i) fleet.attach(*breakers[static_cast<std::size_t>(i)]);
    for (int i = 0; i < kKeys; i += 3) EXPECT_TRUE(fleet.reset(key(i)));
    for (int i = 0; i < kKeys; ++i) EXPECT_TRUE(fleet.detach(key(i)));
  }
  done = true;
  syncer.join();
  reader.join();
  EXPECT_TRUE(fleet.reading().keys.empty());
}

}  // namespace
}  // namespace bulwark::redis
