// Internal: the compile-time parts of bulwark/asio/pipeline.h — the stages' order, the
// awaitable a call returns, how an attempt ended. Not part of the public API.

#ifndef BULWARK_ASIO_DETAIL_PIPELINE_PARTS_H_
#define BULWARK_ASIO_DETAIL_PIPELINE_PARTS_H_

#include <asio/awaitable.hpp>
#include <asio/cancellation_state.hpp>
#include <exception>
#include <optional>
#include <tuple>
#include <type_traits>

#include "bulwark/clock.h"
#include "bulwark/pipeline.h"

namespace bulwark::asio {

namespace detail {

template <class S>
constexpr int rank() {
  if constexpr (requires { S::kAsyncRank; }) {
    return S::kAsyncRank;
  } else if constexpr (requires { S::kRank; }) {
    return S::kRank;
  } else {
    return S::kOrder * 10;
  }
}

template <class... S>
constexpr bool strictly_ranked() {
  constexpr int ranks[] = {rank<S>()..., 999};
  for (int i = 0; i + 1 < static_cast<int>(sizeof...(S)); ++i) {
    if (ranks[i] >= ranks[i + 1]) return false;
  }
  return true;
}

template <int R, class... S>
constexpr int index_of_rank() {
  constexpr int ranks[] = {rank<S>()..., -1};
  for (int i = 0; i < static_cast<int>(sizeof...(S)); ++i) {
    if (ranks[i] == R) return i;
  }
  return -1;
}

template <class S>
struct IsCoreBulkheadStage : std::false_type {};
template <class H>
struct IsCoreBulkheadStage<bulwark::BulkheadStage<H>> : std::true_type {};

template <class A>
struct AwaitableTraits {
  static constexpr bool kIsAwaitable = false;
};
template <class T, class Ex>
struct AwaitableTraits<::asio::awaitable<T, Ex>> {
  static constexpr bool kIsAwaitable = true;
  using value_type = T;
  using executor_type = Ex;
};

template <class F, class Ctx>
using call_awaitable_t =
    typename std::conditional_t<std::is_invocable_v<F&, const Ctx&>,
                                std::invoke_result<F&, const Ctx&>, std::invoke_result<F&>>::type;

template <int I, class C, class... S>
constexpr bool runs_on() {
  if constexpr (I < 0) {
    return true;
  } else {
    using St = std::tuple_element_t<I, std::tuple<S...>>;
    if constexpr (requires { typename St::clock_type; }) {
      return std::is_void_v<typename St::clock_type> || std::is_same_v<typename St::clock_type, C>;
    } else {
      return true;
    }
  }
}

inline bool cancelled(const ::asio::cancellation_state& s) noexcept {
  return s.cancelled() != ::asio::cancellation_type::none;
}

// Why the pipeline cancelled one attempt of a group.
enum class Cut : unsigned char {
  none,      // it did not: whatever the attempt answered is its own answer
  timeout,   // its per-attempt deadline passed
  deadline,  // the request's deadline passed
  lost,      // another attempt of the group won (or threw)
  caller,    // the caller cancelled the call
};

// How one attempt (a group of hedged attempts, or one) ended.
template <class R>
struct AttemptEnd {
  std::optional<R> result;    // the call's own answer, if it gave one
  std::exception_ptr error;   // an exception the call threw on its own
  bool timed_out = false;     // the pipeline cancelled it at its per-attempt deadline
  bool deadline_cut = false;  // the pipeline cancelled it at the request's deadline
  bool caller_cancelled = false;
  Nanos elapsed = Nanos::zero();  // of the winning (or last) attempt
};

}  // namespace detail

}  // namespace bulwark::asio

#endif  // BULWARK_ASIO_DETAIL_PIPELINE_PARTS_H_
