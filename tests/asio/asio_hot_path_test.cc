// A call through the async pipeline that succeeds at once, with a CLOSED breaker and a
// free bulkhead slot and no deadline, neither allocates nor locks once warm: its two
// coroutine frames (the pipeline's and the call's) come from Asio's per-thread frame
// cache, and they resume one another in place. (With a deadline or a timeout the
// attempt is a coroutine of its own: more frames are alive at once than Asio's cache
// holds, so some are allocated — bench/asio counts them — and the attempt's empty
// completion is posted, a lock on the io_context's queue.) Counted with
// tests/support/counting.h, which sees Asio's aligned_alloc too.

#include <gtest/gtest.h>

#include "asio/asio_support.h"
#include "bulwark/asio/pipeline.h"
#include "support/counting.h"

namespace bulwark::testing {
namespace {

using namespace std::chrono_literals;

struct Err {};
::asio::awaitable<Expected<int, Err>> ready() { co_return 1; }

BreakerConfig closed_config() {
  BreakerConfig c;
  c.name = "hot";
  c.consecutive_failures = 5;
  return c;
}

// Runs `calls` calls of `p` in one coroutine, counting only around them.
template <class P, class MakeCtx>
Counts count_calls(const P& p, MakeCtx make_ctx, int calls, int& ok) {
  ::asio::io_context io(1);
  Counts counted;
  ::asio::co_spawn(
      io,
      [&]() -> ::asio::awaitable<void> {
        auto call = [](const Context&) { return ready(); };
        for (int i = 0; i < 100; ++i) (void)co_await p(make_ctx(), call);  // warm the caches
        const Context ctx = make_ctx();
        detail::counts = {};
        detail::counting = true;
        for (int i = 0; i < calls; ++i) {
          auto r = co_await p(ctx, call);
          if (r) ++ok;
        }
        detail::counting = false;
        counted = detail::counts;
      },
      ::asio::detached);
  io.run();
  return counted;
}

TEST(AsioHotPath, AClosedCallWithoutADeadlineNeitherLocksNorAllocates) {
  ASSERT_TRUE(counting_works());
  CircuitBreaker breaker(closed_config());
  bulwark::asio::AsyncBulkhead pool({.name = "hot", .max_concurrent = 4});
  RetryBudget budget({.name = "hot"});
  Retry retry({.name = "hot"}, &budget);
  auto p = bulwark::asio::pipeline(bulwark::breaker(breaker), bulwark::asio::bulkhead(pool),
                                   bulwark::retry(retry));
  int ok = 0;
  const Counts c = count_calls(
      p, [] { return Context(); }, 1000, ok);
  EXPECT_EQ(ok, 1000);
  EXPECT_EQ(c.allocations, 0u);
  if (kCountsLocks) {
    EXPECT_EQ(c.locks, 0u);
  }
  EXPECT_EQ(breaker.snapshot().successes, 1100u);
}

}  // namespace
}  // namespace bulwark::testing
