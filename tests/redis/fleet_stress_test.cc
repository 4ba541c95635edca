// Transitions on request threads while the timer's thread syncs and a scrape reads:
// under TSan this checks the listener's queue, sync() and reading() against each
// other. Threads run for a fixed number of operations, not for a time.

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bulwark/redis/fleet.h"

namespace bulwark::redis {
namespace {

// The only place this test builds a breaker configuration.
CircuitBreaker::Config config(std::string name) {
  return CircuitBreaker::Config{.name = std::move(name), .consecutive_failures = 2};
}

std::string key(int i) {
  std::string k = "k";
  k += std::to_string(i);
  return k;
}

TEST(FleetStressTest, RequestThreadsSyncAndScrapeConcurrently) {
  MemoryFleetStore store;
  constexpr int kKeys = 16;
  std::vector<std::unique_ptr<CircuitBreaker>> mine, theirs;
  Fleet a(FleetConfig{.instance = "a", .queue_capacity = 64}, store);
  Fleet b(FleetConfig{.instance = "b"}, store);
  for (int i = 0; i < kKeys; ++i) {
    mine.push_back(std::make_unique<CircuitBreaker>(config(key(i))));
    theirs.push_back(std::make_unique<CircuitBreaker>(config(key(i))));
    a.attach(*mine.back());
    b.attach(*theirs.back());
  }
  std::atomic<bool> stop{false}, go{false};
  std::atomic<int> finished{0};
  std::vector<std::thread> requests;
  for (int t = 0; t < 2; ++t) {
    requests.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();  // once the syncs have begun
      for (int n = 0; n < 20000; ++n) {
        CircuitBreaker& br = *mine[static_cast<std::size_t>((n + t) % kKeys)];
        if (auto p = br.try_acquire()) {
          p->record(n % 3 == 0 ? Outcome::success : Outcome::failure);
        } else if (n % 7 == 0) {
          br.reset();
        }
      }
      finished.fetch_add(1);
    });
  }
  std::thread scrape([&] {
    while (!stop.load()) {
      const FleetReading r = a.reading();
      EXPECT_EQ(r.keys.size(), static_cast<std::size_t>(kKeys));
      std::this_thread::yield();
    }
  });
  // At least one sync of each while the request threads run (they may be done in a
  // millisecond): they start once the first syncs are under way.
  do {
    go = true;
    ASSERT_TRUE(a.sync());
    ASSERT_TRUE(b.sync());
  } while (finished.load() < 2);
  for (auto& th : requests) th.join();
  stop = true;
  scrape.join();
  ASSERT_TRUE(a.sync());
  ASSERT_TRUE(b.sync());
  // b agrees with every key a's fleet holds open.
  const FleetReading ra = a.reading();
  const FleetReading rb = b.reading();
  for (int i = 0; i < kKeys; ++i) {
    EXPECT_EQ(ra.keys[i].shared_open, rb.keys[i].shared_open) << ra.keys[i].key;
    if (rb.keys[i].shared_open && rb.keys[i].decided_by == "a") {
      EXPECT_NE(theirs[i]->state(), State::closed) << rb.keys[i].key;
    }
  }
  EXPECT_EQ(ra.sync_errors, 0u);
}

}  // namespace
}  // namespace bulwark::redis
