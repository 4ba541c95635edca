// bulwark/asio/rate_limit.h — a rate limit stage that waits on a timer.
//
// In the async pipeline, bulwark::rate_limit(limiter) never waits (a call with no
// permit fails at once with Reason::rate_limited and the exact wait in retry_after).
// bulwark::asio::rate_limit(limiter, max_wait) reserves a permit due within
// min(max_wait, the call's remaining time) and waits for it on a timer of the caller's
// executor (timer.h), suspended; one due later is refused at once. A caller's
// cancellation ends the wait (Reason::cancelled); the reserved permit is spent anyway.
//
//   auto p = bulwark::asio::pipeline(bulwark::asio::rate_limit(search_limiter, 200ms),
//                                    bulwark::breaker(search_breaker));
//
// Cost: the limiter's CAS; a timer (and its coroutine frame) only when the call waits.

#ifndef BULWARK_ASIO_RATE_LIMIT_H_
#define BULWARK_ASIO_RATE_LIMIT_H_

#include <cstdint>

#include "bulwark/pipeline.h"
#include "bulwark/rate_limiter.h"

namespace bulwark {
// Waits on an Asio timer (only the async pipeline can run such a stage).
struct AsyncRateWait {};
}  // namespace bulwark

namespace bulwark::asio {

template <class C>
constexpr RateLimitStage<BasicRateLimiter<C>, AsyncRateWait> rate_limit(
    BasicRateLimiter<C>& l, Nanos max_wait = Nanos::max(), std::uint64_t permits = 1) {
  return {&l, nullptr, max_wait, permits};
}

}  // namespace bulwark::asio

#endif  // BULWARK_ASIO_RATE_LIMIT_H_
