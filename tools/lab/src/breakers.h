// The lab's breaker types, chosen at run time from a configuration's window().
//
// A breaker's window is a template parameter, so a configuration read from a file
// picks one of three types; code that drives a breaker is written once as a template
// and instantiated for each by with_breaker_type().

#ifndef BULWARK_LAB_SRC_BREAKERS_H_
#define BULWARK_LAB_SRC_BREAKERS_H_

#include <type_traits>

#include "bulwark/circuit_breaker.h"
#include "bulwark/fallback.h"
#include "bulwark/lab/config.h"

namespace bulwark::lab {

template <class Window>
using ManualBreaker = BasicCircuitBreaker<ManualClock, Window>;
static_assert(
    std::is_same_v<ManualBreaker<TimeWindow<kTimeWindowCapacity>>::Config, TimeWindowConfig>);

// Calls f(std::type_identity<Breaker>{}) with the breaker type for `kind`.
template <class F>
decltype(auto) with_breaker_type(WindowKind kind, F&& f) {
  switch (kind) {
    case WindowKind::count:
      return f(std::type_identity<ManualBreaker<CountWindow>>{});
    case WindowKind::time:
      return f(std::type_identity<ManualBreaker<TimeWindow<kTimeWindowCapacity>>>{});
    case WindowKind::none:
      break;
  }
  return f(std::type_identity<ManualBreaker<NoWindow>>{});
}

// The pipeline's mapping of a breaker rejection to a failure reason.
constexpr Reason reason_of(RejectReason r) noexcept {
  switch (r) {
    case RejectReason::open:
      return Reason::breaker_open;
    case RejectReason::half_open_full:
    case RejectReason::half_open_throttled:
      return Reason::breaker_half_open_full;
    case RejectReason::forced_open:
      return Reason::breaker_forced_open;
  }
  return Reason::breaker_open;
}

}  // namespace bulwark::lab

#endif  // BULWARK_LAB_SRC_BREAKERS_H_
