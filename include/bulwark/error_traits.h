// bulwark/error_traits.h — how a pipeline reads a call's result and error.
//
// A call through a pipeline returns a result type that holds a value or an error:
// bulwark::Expected<T, E>, or std::expected<T, E> where the standard library has it
// (C++23). ResultTraits<R> says how to look inside; specialize it for another result
// type (an absl::StatusOr-like type, say).
//
// ErrorTraits<E> says what an error means to the resilience stages: whether it is the
// dependency's fault (a failure: counted by the breaker, retried) or the caller's
// (ignored: never retried, neither success nor failure for the breaker), and whether it
// carries a server's retry-after hint (and, optionally, whether it says the dependency is
// overloaded: is_overload() below). By default it uses E's members when they exist —
// `Outcome outcome() const` and `std::optional<Nanos> retry_after() const` — and
// otherwise treats every error as a failure with no hint. std::error_code is understood
// out of the box. Specialize it for error types you cannot change:
//
//   template <> struct bulwark::ErrorTraits<grpc::Status> {
//     static bulwark::Outcome outcome(const grpc::Status& s) {
//       return s.error_code() == grpc::INVALID_ARGUMENT ? bulwark::Outcome::ignored
//                                                       : bulwark::Outcome::failure;
//     }
//     static std::optional<bulwark::Nanos> retry_after(const grpc::Status&) { return {}; }
//   };
//
// Cost: whatever the specialization does; the defaults are inline and free.
// Thread-safety: the traits are stateless.

#ifndef BULWARK_ERROR_TRAITS_H_
#define BULWARK_ERROR_TRAITS_H_

#include <concepts>
#include <optional>
#include <system_error>
#include <type_traits>
#include <utility>
#if __has_include(<expected>)
#include <expected>
#endif

#include "bulwark/clock.h"
#include "bulwark/expected.h"
#include "bulwark/outcome.h"

namespace bulwark {

template <class E>
struct ErrorTraits {
  static Outcome outcome(const E& e) {
    if constexpr (requires {
                    { e.outcome() } -> std::convertible_to<Outcome>;
                  }) {
      return e.outcome();
    } else {
      return Outcome::failure;
    }
  }
  static std::optional<Nanos> retry_after(const E& e) {
    if constexpr (requires {
                    { e.retry_after() } -> std::convertible_to<std::optional<Nanos>>;
                  }) {
      return e.retry_after();
    } else {
      (void)e;
      return std::nullopt;
    }
  }
};

// Whether an error says the dependency is overloaded (an HTTP 429 or 503, a gRPC
// RESOURCE_EXHAUSTED): what an adaptive limit counts as a drop. ErrorTraits<E>::
// overloaded(e) when the traits define it, else E's `bool overloaded() const`, else
// whether the error carries a retry-after hint (a server asking to come back later).
template <class E>
bool is_overload(const E& e) {
  if constexpr (requires {
                  { ErrorTraits<E>::overloaded(e) } -> std::convertible_to<bool>;
                }) {
    return ErrorTraits<E>::overloaded(e);
  } else if constexpr (requires {
                         { e.overloaded() } -> std::convertible_to<bool>;
                       }) {
    return e.overloaded();
  } else {
    return ErrorTraits<E>::retry_after(e).has_value();
  }
}

// std::error_code: every error is the dependency's fault, except a cancelled operation
// (std::errc::operation_canceled, which is also what Asio reports for an aborted
// operation), which is ignored: the caller gave up, the dependency did nothing wrong.
template <>
struct ErrorTraits<std::error_code> {
  static Outcome outcome(const std::error_code& e) noexcept {
    return e == std::errc::operation_canceled ? Outcome::ignored : Outcome::failure;
  }
  static std::optional<Nanos> retry_after(const std::error_code&) noexcept { return std::nullopt; }
};

// How to look inside a call's result: is it a value, what value, what error.
// Specializations provide value_type, error_type, has_value(r), take_value(r&&) and
// error(r); the primary template has none, so an unknown result type is a clear
// compile-time error where the pipeline checks `Result<R>`.
template <class R>
struct ResultTraits {};

template <class T, class E>
struct ResultTraits<Expected<T, E>> {
  using value_type = T;
  using error_type = E;
  static bool has_value(const Expected<T, E>& r) noexcept { return r.has_value(); }
  static auto take_value(Expected<T, E>&& r) {
    if constexpr (!std::is_void_v<T>) return T(std::move(*r));
  }
  static E& error(Expected<T, E>& r) noexcept { return r.error(); }
};

#if defined(__cpp_lib_expected) && __cpp_lib_expected >= 202202L
template <class T, class E>
struct ResultTraits<std::expected<T, E>> {
  using value_type = T;
  using error_type = E;
  static bool has_value(const std::expected<T, E>& r) noexcept { return r.has_value(); }
  static auto take_value(std::expected<T, E>&& r) {
    if constexpr (!std::is_void_v<T>) return T(std::move(*r));
  }
  static E& error(std::expected<T, E>& r) noexcept { return r.error(); }
};
#endif

// A type the pipeline can take as a call's result.
template <class R>
concept Result = requires(R& r) {
  typename ResultTraits<R>::value_type;
  typename ResultTraits<R>::error_type;
  { ResultTraits<R>::has_value(r) } -> std::convertible_to<bool>;
  ResultTraits<R>::error(r);
};

}  // namespace bulwark

#endif  // BULWARK_ERROR_TRAITS_H_
