// The async pipeline on a multi-threaded io_context (3 threads, real time, real
// sockets): coroutines on strands of their own share one breaker, two bulkheads, a
// retry and its budget, a hedge and a latency tracker, against an upstream that
// answers, fails and stalls. Invariants: never more calls inside than the bulkhead
// allows, every call ends, every slot and socket goes back. Run it under TSan.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "asio/asio_support.h"
#include "bulwark/asio/pipeline.h"

namespace bulwark::testing {
namespace {

using namespace std::chrono_literals;

BreakerConfig lenient() {
  BreakerConfig c;
  c.name = "upstream";
  c.consecutive_failures = 65535;  // stays closed: every call reaches the bulkheads
  return c;
}

TEST(AsyncPipelineStress, ManyCoroutinesOnManyThreadsKeepEveryInvariant) {
  ::asio::io_context io(3);
  auto work = ::asio::make_work_guard(io);
  Upstream<SteadyClock> up(::asio::make_strand(io));
  up.set(Mode::mixed, 2ms);  // a quarter fail; one in eight takes 200 ms: past the timeout

  CircuitBreaker breaker(lenient());
  bulwark::asio::AsyncBulkhead counted(
      {.name = "counted", .max_concurrent = 8, .max_queue = 10'000, .max_wait = 30s});
  bulwark::asio::AsyncBulkhead hedged_pool(
      {.name = "hedged", .max_concurrent = 8, .max_queue = 10'000, .max_wait = 30s});
  RetryBudget budget({.name = "upstream", .ratio = 1.0, .min_retries_per_second = 1000});
  Retry retry({.name = "upstream", .max_attempts = 3, .backoff = Backoff::constant(1ms)}, &budget);
  bulwark::asio::LatencyTracker latency;

  auto plain = bulwark::asio::pipeline(bulwark::breaker(breaker), bulwark::asio::bulkhead(counted),
                                       bulwark::retry(retry), bulwark::timeout(50ms));
  auto hedged = bulwark::asio::pipeline(
      bulwark::breaker(breaker), bulwark::asio::bulkhead(hedged_pool), bulwark::retry(retry),
      bulwark::asio::hedge({.max_hedges = 1,
                            .delay = bulwark::asio::HedgeDelay::percentile(latency, 0.9, 5ms),
                            .record_to = &latency}),
      bulwark::timeout(50ms));

  std::atomic<int> inside{0};
  std::atomic<int> most_inside{0};
  auto counted_call = [&](const Context& c) -> ::asio::awaitable<Expected<std::string, NetError>> {
    const int now_inside = inside.fetch_add(1) + 1;
    struct Leave {
      std::atomic<int>& n;
      ~Leave() { n.fetch_sub(1); }  // also when an aborted co_await throws
    } leave{inside};
    int seen = most_inside.load();
    while (now_inside > seen && !most_inside.compare_exchange_weak(seen, now_inside)) {
    }
    co_return co_await fetch<SteadyClock>(up.endpoint(), c);
  };
  auto call = [&](const Context& c) { return fetch<SteadyClock>(up.endpoint(), c); };

  constexpr int kCoroutines = 200;
  constexpr int kCallsEach = 3;
  std::atomic<int> done{0};
  std::atomic<int> ok{0};
  for (int i = 0; i < kCoroutines; ++i) {
    ::asio::co_spawn(
        ::asio::make_strand(io),
        [&, i]() -> ::asio::awaitable<void> {
          for (int k = 0; k < kCallsEach; ++k) {
            const Context ctx(SteadyClock{}, {}, Deadline::after(SteadyClock{}, 5s));
            const bool use_hedge = (i + k) % 2 == 0;
            const bool answered = use_hedge ? static_cast<bool>(co_await hedged(ctx, call))
                                            : static_cast<bool>(co_await plain(ctx, counted_call));
            if (answered) ok.fetch_add(1);
            done.fetch_add(1);
          }
        },
        ::asio::detached);
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) threads.emplace_back([&] { io.run(); });

  // Poll with a bound: real sockets and real time.
  const auto give_up = std::chrono::steady_clock::now() + 60s;
  auto wait_for = [&](auto&& cond) {
    while (!cond() && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(1ms);
    }
    return cond();
  };
  EXPECT_TRUE(wait_for([&] { return done.load() == kCoroutines * kCallsEach; }));
  EXPECT_TRUE(wait_for([&] { return up.open() == 0; }));
  work.reset();
  up.stop();
  for (auto& t : threads) t.join();

  EXPECT_EQ(done.load(), kCoroutines * kCallsEach);
  EXPECT_GT(ok.load(), 0);
  EXPECT_LE(most_inside.load(), 8);
  EXPECT_GE(most_inside.load(), 2);  // there was concurrency to bound
  EXPECT_EQ(counted.in_use(), 0u);
  EXPECT_EQ(counted.queued(), 0u);
  EXPECT_EQ(hedged_pool.in_use(), 0u);
  EXPECT_EQ(hedged_pool.queued(), 0u);
  EXPECT_EQ(up.open(), 0);
  const auto s = breaker.snapshot();
  EXPECT_EQ(s.permitted, static_cast<std::uint64_t>(kCoroutines * kCallsEach));
  EXPECT_EQ(s.successes + s.failures + s.ignored + s.cancelled, s.permitted);
}

}  // namespace
}  // namespace bulwark::testing
