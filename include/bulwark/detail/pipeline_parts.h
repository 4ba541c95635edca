// Internal: the compile-time parts of bulwark/pipeline.h — where each stage goes, the
// breaker's per-attempt hooks, rejection reasons as the pipeline reports them. Not part
// of the public API.

#ifndef BULWARK_DETAIL_PIPELINE_PARTS_H_
#define BULWARK_DETAIL_PIPELINE_PARTS_H_

#include <cstdint>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "bulwark/bulkhead.h"
#include "bulwark/circuit_breaker.h"
#include "bulwark/clock.h"
#include "bulwark/fallback.h"
#include "bulwark/outcome.h"

namespace bulwark {

namespace detail {

// Where a stage goes, outermost first: kRank if it has one, else kOrder * 10.
template <class S>
constexpr int stage_rank() {
  if constexpr (requires { S::kRank; }) {
    return S::kRank;
  } else {
    return S::kOrder * 10;
  }
}

template <int K, class... S>
constexpr int stage_index() {
  constexpr int orders[] = {stage_rank<S>()..., -1};
  for (int i = 0; i < static_cast<int>(sizeof...(S)); ++i) {
    if (orders[i] == K) return i;
  }
  return -1;
}

// True if stage I (absent: I < 0) of S... reads the clock type C.
template <int I, class C, class... S>
constexpr bool stage_runs_on() {
  if constexpr (I < 0) {
    return true;
  } else {
    return std::is_same_v<typename std::tuple_element_t<I, std::tuple<S...>>::clock_type, C>;
  }
}

template <class... S>
constexpr bool strictly_ordered() {
  constexpr int orders[] = {stage_rank<S>()..., 999};
  for (int i = 0; i + 1 < static_cast<int>(sizeof...(S)); ++i) {
    if (orders[i] >= orders[i + 1]) return false;
  }
  return true;
}

// Tracks what the whole-call breaker needs to know after the inner stages ran.
struct Trace {
  std::uint32_t attempts = 0;
  Outcome last = Outcome::success;
};

// Per-attempt hooks for the breaker. The "none" version makes everything vanish.
struct NoAttemptHook {
  static constexpr bool kActive = false;
  std::optional<Rejection> before(std::uint32_t) noexcept { return std::nullopt; }
  void after(Outcome, Nanos) noexcept {}
};

template <class B>
struct BreakerAttemptHook {
  static constexpr bool kActive = true;
  B* breaker;
  std::optional<typename B::Permit> current;  // attempt 1: the permit taken by the stage

  std::optional<Rejection> before(std::uint32_t attempt) noexcept {
    if (attempt == 1 && current) return std::nullopt;
    auto p = breaker->try_acquire();
    if (!p) return p.error();
    current.emplace(std::move(*p));
    return std::nullopt;
  }
  void after(Outcome o, Nanos d) noexcept {
    if (current) {
      current->record(o, d);
      current.reset();
    }
  }
};

constexpr Reason reason_of(RejectReason r) noexcept {
  switch (r) {
    case RejectReason::open:
      return Reason::breaker_open;
    case RejectReason::half_open_full:
    case RejectReason::half_open_throttled:  // a probe not drawn in fraction mode
      return Reason::breaker_half_open_full;
    case RejectReason::forced_open:
      return Reason::breaker_forced_open;
  }
  return Reason::breaker_open;
}

constexpr Reason reason_of(BulkheadRejectReason r) noexcept {
  switch (r) {
    case BulkheadRejectReason::full:
      return Reason::bulkhead_full;
    case BulkheadRejectReason::deadline_exceeded:
      return Reason::deadline_exceeded;
    case BulkheadRejectReason::cancelled:
      return Reason::cancelled;
  }
  return Reason::bulkhead_full;
}

}  // namespace detail

}  // namespace bulwark

#endif  // BULWARK_DETAIL_PIPELINE_PARTS_H_
