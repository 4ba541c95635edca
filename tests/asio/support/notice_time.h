// notice_time(): a test's io_context sees the virtual clock's move at once.

#ifndef BULWARK_TESTS_ASIO_SUPPORT_NOTICE_TIME_H_
#define BULWARK_TESTS_ASIO_SUPPORT_NOTICE_TIME_H_

#include <asio/io_context.hpp>
#include <system_error>

#include "bulwark/asio/timer.h"
#include "bulwark/clock.h"

namespace bulwark::testing {

// Makes `io`'s reactor look at its timers after the virtual clock moved, and queues
// every timer due at the new time. On Linux the reactor looks at its timers only when
// its timerfd fires, and that is armed for up to 1 ms of real time while a virtual
// timer is pending (ManualTimerClock's cap): a poll() right after a move may not see
// it. A timer due before any other re-arms the timerfd to fire at once; when its
// handler has run, the same look has queued every other due timer behind it.
inline void notice_time(::asio::io_context& io) {
  bulwark::asio::Timer<ManualClock> nudge(io.get_executor());
  nudge.expires_at(bulwark::asio::ManualTimerClock::time_point::min());
  bool seen = false;
  nudge.async_wait([&](std::error_code) { seen = true; });
  while (!seen) {
    if (io.stopped()) io.restart();
    io.run_one();
  }
}

}  // namespace bulwark::testing

#endif  // BULWARK_TESTS_ASIO_SUPPORT_NOTICE_TIME_H_
