// Calls for the async pipeline that live entirely in virtual time, without sockets:
// they wait on Asio timers of a ManualClock bound to ManualTimerClock, and the test
// decides when and how each ends. A fixture owning the clock, its binding and an
// io_context, and a runner that drives one pipeline call to its end.

#ifndef BULWARK_TESTS_ASIO_VIRTUAL_CALL_H_
#define BULWARK_TESTS_ASIO_VIRTUAL_CALL_H_

#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/error.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <chrono>
#include <optional>
#include <string>
#include <system_error>

#include "asio/asio_support.h"
#include "bulwark/asio/pipeline.h"
#include "bulwark/asio/timer.h"

namespace bulwark::testing {

using VClock = ManualClock;
using VCtx = BasicContext<VClock>;
using VReply = Expected<std::string, NetError>;
using VResult = Expected<std::string, Failure<NetError>>;

// Waits `d` of virtual time on the calling coroutine's executor, honouring its
// cancellation. True if the time passed, false if the wait was cancelled.
inline ::asio::awaitable<bool> sleep_for(Nanos d) {
  bulwark::asio::Timer<VClock> t(co_await ::asio::this_coro::executor);
  t.expires_after(d);
  auto [ec] = co_await t.async_wait(::asio::experimental::as_tuple(::asio::use_awaitable));
  co_return !ec;
}

// As sleep_for(), deaf to cancellation: the wait runs its full length whatever the
// caller emits (a call that is slow to honour a cancellation).
inline ::asio::awaitable<void> sleep_deaf(Nanos d) {
  bulwark::asio::Timer<VClock> t(co_await ::asio::this_coro::executor);
  t.expires_after(d);
  co_await t.async_wait(::asio::bind_cancellation_slot(
      ::asio::cancellation_slot(), ::asio::experimental::as_tuple(::asio::use_awaitable)));
}

inline VReply aborted() {
  return Unexpected(NetError{::asio::error::make_error_code(::asio::error::operation_aborted)});
}

// A clock bound to ManualTimerClock and a one-thread io_context on it.
class VirtualTimeTest : public ::testing::Test {
 protected:
  VClock clock;
  bulwark::asio::ManualTimerClock::Binding bind{clock};
  ::asio::io_context io{1};

  // Runs `p(ctx, f)` in a coroutine of its own and drives the io_context until it
  // ends (or `limit` of virtual time passed). The answer, and the virtual time taken.
  template <class P, class F>
  std::optional<VResult> run(const P& p, VCtx ctx, F f, Nanos limit = std::chrono::seconds(120)) {
    std::optional<VResult> out;
    const Ticks start = now_ticks(clock);
    ::asio::co_spawn(
        io, [&]() -> ::asio::awaitable<void> { out.emplace(co_await p(ctx, f)); },
        ::asio::detached);
    drive(
        io, clock, [&] { return out.has_value(); }, limit);
    took = Nanos(now_ticks(clock) - start);
    return out;
  }
  Nanos took{};
};

}  // namespace bulwark::testing

#endif  // BULWARK_TESTS_ASIO_VIRTUAL_CALL_H_
