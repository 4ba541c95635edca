// ManualTimerClock's wait traits: a reactor blocked on a virtual timer waits at most
// 1 ms of real time, and some real time (no busy loop); an io_context running on a
// thread of its own notices a moved clock. No verdict here depends on how long anything
// took in real time.

#include <gtest/gtest.h>

#include <asio/io_context.hpp>
#include <atomic>
#include <chrono>
#include <system_error>
#include <thread>

#include "bulwark/asio/timer.h"

namespace bulwark::testing {
namespace {

using namespace std::chrono_literals;
using bulwark::asio::ManualTimerClock;
using Traits = ManualTimerClock::WaitTraits;

TEST(ManualTimerClockTraits, APendingTimerIsWaitedForAtMostOneMillisecondAndNeverZero) {
  // Zero here is a busy loop: the reactor asks again at once, for as long as the
  // timer is pending.
  for (Nanos due :
       {Nanos(1), Nanos(1us), Nanos(999us), Nanos(1ms), Nanos(10s), Nanos(24h), Nanos::max()}) {
    const Nanos wait = Traits::to_wait_duration(due);
    EXPECT_GT(wait, Nanos::zero()) << due.count();
    EXPECT_LE(wait, Nanos(1ms)) << due.count();
    EXPECT_LE(wait, due);
  }
  EXPECT_EQ(Traits::to_wait_duration(Nanos(10s)), Nanos(1ms));
}

TEST(ManualTimerClockTraits, ADueTimerIsNotWaitedFor) {
  EXPECT_EQ(Traits::to_wait_duration(Nanos::zero()), Nanos::zero());
  EXPECT_EQ(Traits::to_wait_duration(Nanos(-5ms)), Nanos::zero());
  EXPECT_EQ(Traits::to_wait_duration(Nanos::min()), Nanos::zero());
}

TEST(ManualTimerClockTraits, ATimePointIsMeasuredFromTheBoundClock) {
  ManualClock clock;
  clock.advance(1h);
  ManualTimerClock::Binding bind(clock);
  const auto now = ManualTimerClock::now();
  EXPECT_EQ(Traits::to_wait_duration(now + Nanos(10s)), Nanos(1ms));
  EXPECT_EQ(Traits::to_wait_duration(now + Nanos(300us)), Nanos(300us));
  EXPECT_EQ(Traits::to_wait_duration(now), Nanos::zero());
  EXPECT_EQ(Traits::to_wait_duration(now - Nanos(1s)), Nanos::zero());
  EXPECT_EQ(Traits::to_wait_duration(ManualTimerClock::time_point::max()), Nanos(1ms));
}

TEST(ManualTimerClockTimer, ATimerThatNeverFiresLeavesRunOneForWithNothingDone) {
  ManualClock clock;
  ManualTimerClock::Binding bind(clock);
  ::asio::io_context io(1);
  bulwark::asio::Timer<ManualClock> t(io.get_executor());
  t.expires_after(1h);
  bool fired = false;
  t.async_wait([&](std::error_code) { fired = true; });
  // The reactor blocks in short waits until the real bound; virtual time stands still.
  EXPECT_EQ(io.run_one_for(5ms), 0u);
  EXPECT_EQ(io.run_for(5ms), 0u);
  EXPECT_FALSE(fired);
  clock.advance(1h);
  EXPECT_EQ(io.run_one_for(1h), 1u);  // due now: handled without a wait
  EXPECT_TRUE(fired);
}

TEST(ManualTimerClockTimer, AnIoContextOnItsOwnThreadNoticesAMovedClock) {
  // Were the reactor to block for the virtual time left (an hour), this would hang
  // until the test's timeout; it wakes within a millisecond and sees the new time.
  ManualClock clock;
  ManualTimerClock::Binding bind(clock);
  ::asio::io_context io(1);
  bulwark::asio::Timer<ManualClock> t(io.get_executor());
  t.expires_after(1h);
  std::atomic<bool> fired{false};
  t.async_wait([&](std::error_code ec) { fired.store(!ec); });
  std::atomic<bool> running{false};
  std::thread runner([&] {
    running.store(true);
    io.run();
  });
  while (!running.load()) std::this_thread::yield();
  clock.advance(1h);
  runner.join();  // run() returns once the timer's handler ran: nothing else is pending
  EXPECT_TRUE(fired.load());
}

}  // namespace
}  // namespace bulwark::testing
