// bulwark/outcome.h — what a call's result means to a resilience policy.
//
// Every policy in bulwark sees a call's result through this one classification:
//   success  the dependency did its job (even if the answer was "not found")
//   failure  the dependency is at fault: counts toward opening a breaker, may be retried
//   ignored  neither: e.g. a 4xx caused by the caller's own request. It releases the
//            permit and counts nowhere (Resilience4j's ignoreExceptions).
// A slow success still is a success here; slowness is judged from the call's duration.

#ifndef BULWARK_OUTCOME_H_
#define BULWARK_OUTCOME_H_

#include <cstdint>
#include <string_view>

namespace bulwark {

enum class Outcome : std::uint8_t { success, failure, ignored };

constexpr std::string_view to_string(Outcome o) noexcept {
  switch (o) {
    case Outcome::success:
      return "success";
    case Outcome::failure:
      return "failure";
    case Outcome::ignored:
      return "ignored";
  }
  return "unknown";
}

}  // namespace bulwark

#endif  // BULWARK_OUTCOME_H_
