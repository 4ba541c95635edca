// A never-answering upstream and a 200 ms request deadline, in real time on a
// 2-thread io_context: every request returns within its deadline plus scheduling
// slack (a bound generous enough for the sanitizers: it tells "cancelled on time"
// from "waited for the socket", not how fast the machine is), and every socket the
// client opened is closed by the cancelled attempt.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "asio/asio_support.h"
#include "bulwark/asio/pipeline.h"

namespace bulwark::testing {
namespace {

using namespace std::chrono_literals;

TEST(AsyncDeadline, ANeverAnsweringUpstreamCostsEachRequestItsDeadlineAndNoSocket) {
  ::asio::io_context io(2);
  auto work = ::asio::make_work_guard(io);
  Upstream<SteadyClock> up(::asio::make_strand(io));
  up.set(Mode::never);
  RetryBudget budget({.name = "upstream"});
  Retry retry({.name = "upstream", .max_attempts = 3, .backoff = Backoff::constant(10ms)}, &budget);
  bulwark::asio::AsyncBulkhead pool({.name = "upstream", .max_concurrent = 100});
  auto p = bulwark::asio::pipeline(bulwark::asio::bulkhead(pool), bulwark::retry(retry));

  constexpr int kRequests = 50;
  constexpr auto kDeadline = 200ms;
  constexpr auto kSlack = 1500ms;
  std::atomic<int> done{0};
  std::atomic<int> on_time{0};
  std::atomic<int> deadline_exceeded{0};
  std::atomic<long long> latest_ns{0};
  for (int i = 0; i < kRequests; ++i) {
    ::asio::co_spawn(
        ::asio::make_strand(io),
        [&]() -> ::asio::awaitable<void> {
          const auto start = std::chrono::steady_clock::now();
          const Context ctx(SteadyClock{}, {}, Deadline::after(SteadyClock{}, kDeadline));
          auto r = co_await p(
              ctx, [&](const Context& c) { return fetch<SteadyClock>(up.endpoint(), c); });
          const auto took = std::chrono::steady_clock::now() - start;
          if (!r && r.error().reason == Reason::deadline_exceeded) deadline_exceeded.fetch_add(1);
          if (took >= kDeadline - 1ms && took <= kDeadline + kSlack) on_time.fetch_add(1);
          long long seen = latest_ns.load();
          const long long ns = std::chrono::duration_cast<Nanos>(took).count();
          while (ns > seen && !latest_ns.compare_exchange_weak(seen, ns)) {
          }
          done.fetch_add(1);
        },
        ::asio::detached);
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) threads.emplace_back([&] { io.run(); });
  const auto give_up = std::chrono::steady_clock::now() + 30s;
  auto wait_for = [&](auto&& cond) {
    while (!cond() && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(1ms);
    }
    return cond();
  };
  EXPECT_TRUE(wait_for([&] { return done.load() == kRequests; }));
  EXPECT_TRUE(wait_for([&] { return up.open() == 0; }));
  const int accepted = up.accepted();
  work.reset();
  up.stop();
  for (auto& t : threads) t.join();

  EXPECT_EQ(deadline_exceeded.load(), kRequests);
  EXPECT_EQ(on_time.load(), kRequests) << "slowest: " << latest_ns.load() / 1'000'000 << " ms";
  EXPECT_EQ(accepted, kRequests);  // one attempt each: no retry fits after the deadline
  EXPECT_EQ(up.open(), 0);
  EXPECT_EQ(pool.in_use(), 0u);
}

}  // namespace
}  // namespace bulwark::testing
