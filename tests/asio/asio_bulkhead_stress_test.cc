// The async bulkhead on real threads (real time): coroutines on two io_contexts (one run
// by two threads, on strands) and two plain threads that take free slots and give them
// back, all on one bulkhead; midway, one io_context is stopped and destroyed while the
// others keep giving slots back (a grant may race its shutdown). Invariants: never more
// holders than slots, every coroutine of the surviving context finishes (a lost wakeup
// would leave one waiting until its 60 s max_wait), every frame of the destroyed one is
// destroyed, and every slot goes back. Run it under TSan.

#include <gtest/gtest.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/strand.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "bulwark/asio/bulkhead.h"
#include "support/high_water.h"
#include "support/patience.h"

namespace bulwark::testing {
namespace {

using namespace std::chrono_literals;

constexpr std::uint32_t kSlots = 3;

using Holders = test::HighWater;
// One holder for its scope (a frame destroyed while it holds leaves too).
struct Hold {
  Holders& h;
  explicit Hold(Holders& hs) : h(hs) { h.enter(); }
  ~Hold() { h.leave(); }
};

struct Alive {
  std::atomic<int>& n;
  explicit Alive(std::atomic<int>& c) : n(c) { n.fetch_add(1); }
  ~Alive() { n.fetch_sub(1); }
};

TEST(AsyncBulkheadStress, SlotsAreConservedAcrossThreadsAndADestroyedContext) {
  bulwark::asio::AsyncBulkhead pool(
      {.name = "p", .max_concurrent = kSlots, .max_queue = 100'000, .max_wait = 60s});
  Holders holders;
  std::atomic<int> rejected{0};
  std::atomic<int> finished_b{0};
  std::atomic<int> alive_a{0};
  std::atomic<bool> stop_threads{false};

  auto body = [&](std::atomic<int>* alive, std::atomic<int>* finished,
                  int rounds) -> ::asio::awaitable<void> {
    std::unique_ptr<Alive> guard;
    if (alive != nullptr) guard = std::make_unique<Alive>(*alive);
    auto ex = co_await ::asio::this_coro::executor;
    for (int i = 0; i < rounds; ++i) {
      auto r = co_await pool.acquire(Context(SteadyClock{}), ::asio::use_awaitable);
      if (!r) {
        rejected.fetch_add(1);
        continue;
      }
      Hold hold(holders);
      co_await ::asio::post(ex, ::asio::use_awaitable);  // holds it across a step
    }
    if (finished != nullptr) finished->fetch_add(1);
  };

  auto a = std::make_unique<::asio::io_context>(1);
  ::asio::io_context b(2);
  auto work_a = ::asio::make_work_guard(*a);
  auto work_b = ::asio::make_work_guard(b);
  constexpr int kPerContext = 64;
  constexpr int kRounds = 50;
  for (int i = 0; i < kPerContext; ++i) {
    ::asio::co_spawn(*a, body(&alive_a, nullptr, 1'000'000), ::asio::detached);  // until A dies
    ::asio::co_spawn(::asio::make_strand(b), body(nullptr, &finished_b, kRounds), ::asio::detached);
  }
  std::thread ta([&] { a->run(); });
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) threads.emplace_back([&] { b.run(); });
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      while (!stop_threads.load()) {
        if (auto p = pool.take_if_free()) {
          Hold hold(holders);
          std::this_thread::yield();
        }  // given back from a thread no io_context runs
        std::this_thread::yield();
      }
    });
  }

  // Waits for what other threads do; only a hang or a lost wakeup reaches the bound.
  auto wait_for = [&](auto&& cond) {
    test::Patience patience;
    while (!cond() && !patience.exhausted()) std::this_thread::sleep_for(1ms);
    return cond();
  };
  // Midway, A stops and is destroyed with waiters queued, while B and the threads go on.
  EXPECT_TRUE(wait_for([&] { return finished_b.load() >= kPerContext / 4; }));
  a->stop();
  ta.join();
  work_a.reset();
  a.reset();
  EXPECT_EQ(alive_a.load(), 0) << "a frame of the destroyed io_context survived it";

  EXPECT_TRUE(wait_for([&] { return finished_b.load() == kPerContext; }))
      << finished_b.load() << " of " << kPerContext << " finished; in_use " << pool.in_use()
      << ", queued " << pool.queued();
  stop_threads.store(true);
  work_b.reset();
  for (auto& t : threads) t.join();

  EXPECT_LE(holders.most.load(), static_cast<int>(kSlots));
  EXPECT_EQ(holders.now.load(), 0);
  EXPECT_EQ(rejected.load(), 0);
  EXPECT_EQ(pool.in_use(), 0u);
  EXPECT_EQ(pool.queued(), 0u);
}

}  // namespace
}  // namespace bulwark::testing
