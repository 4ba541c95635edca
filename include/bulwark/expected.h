// bulwark/expected.h — a value or the reason there is none.
//
// bulwark reports everything that is part of normal operation — a breaker rejecting a
// call, a bulkhead being full, a retry budget running out — as a value, never as an
// exception: those paths run thousands of times a second during an incident and must
// stay cheap and allocation-free, and the core must work under -fno-exceptions.
// `Expected<T, E>` is the small subset of C++23 std::expected that bulwark needs; when
// bulwark moves to C++23 it can become an alias.
//
//   auto permit = breaker.try_acquire();       // Expected<Permit, Rejection>
//   if (!permit) return respond_503(permit.error().retry_after);
//   permit->record(Outcome::success);
//
// Accessing the value of an Expected that holds an error (or the reverse) is a
// precondition violation: it aborts in debug builds and is undefined otherwise, as
// with std::optional::operator*.

#ifndef BULWARK_EXPECTED_H_
#define BULWARK_EXPECTED_H_

#include <cassert>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace bulwark {

// Wraps an error so that Expected's constructor can tell it from a value.
template <class E>
class Unexpected {
 public:
  constexpr explicit Unexpected(E error) noexcept(std::is_nothrow_move_constructible_v<E>)
      : error_(std::move(error)) {}
  constexpr const E& error() const& noexcept { return error_; }
  constexpr E& error() & noexcept { return error_; }
  constexpr E&& error() && noexcept { return std::move(error_); }

 private:
  E error_;
};

template <class E>
Unexpected(E) -> Unexpected<E>;

template <class T, class E>
class [[nodiscard]] Expected {
  static_assert(!std::is_reference_v<T> && !std::is_reference_v<E>);

 public:
  using value_type = T;
  using error_type = E;

  template <class U = T>
  requires std::is_constructible_v<T, U&&> &&(!std::is_same_v<std::remove_cvref_t<U>, Expected>)&&(
      !std::is_same_v<
          std::remove_cvref_t<U>,
          std::in_place_t>)constexpr Expected(U&& value) noexcept(std::
                                                                      is_nothrow_constructible_v<
                                                                          T, U&&>)  // NOLINT
      : has_value_(true) {
    std::construct_at(&value_, std::forward<U>(value));
  }

  template <class... Args>
  constexpr explicit Expected(std::in_place_t, Args&&... args) : has_value_(true) {
    std::construct_at(&value_, std::forward<Args>(args)...);
  }

  template <class G>
  requires std::is_constructible_v<E, G&&>
  constexpr Expected(Unexpected<G> u) noexcept(std::is_nothrow_constructible_v<E, G&&>)  // NOLINT
      : has_value_(false) {
    std::construct_at(&error_, std::move(u).error());
  }

  constexpr Expected(Expected&& other) noexcept(
      std::is_nothrow_move_constructible_v<T>&& std::is_nothrow_move_constructible_v<E>)
      : has_value_(other.has_value_) {
    if (has_value_) {
      std::construct_at(&value_, std::move(other.value_));
    } else {
      std::construct_at(&error_, std::move(other.error_));
    }
  }

  constexpr Expected(const Expected& other) requires std::is_copy_constructible_v<T> &&
      std::is_copy_constructible_v<E> : has_value_(other.has_value_) {
    if (has_value_) {
      std::construct_at(&value_, other.value_);
    } else {
      std::construct_at(&error_, other.error_);
    }
  }

  Expected& operator=(Expected&& other) noexcept(
      std::is_nothrow_move_constructible_v<T>&& std::is_nothrow_move_constructible_v<E>) {
    if (this != &other) {
      destroy();
      has_value_ = other.has_value_;
      if (has_value_) {
        std::construct_at(&value_, std::move(other.value_));
      } else {
        std::construct_at(&error_, std::move(other.error_));
      }
    }
    return *this;
  }

  Expected& operator=(const Expected& other) requires std::is_copy_constructible_v<T> &&
      std::is_copy_constructible_v<E> {
    if (this != &other) {
      destroy();
      has_value_ = other.has_value_;
      if (has_value_) {
        std::construct_at(&value_, other.value_);
      } else {
        std::construct_at(&error_, other.error_);
      }
    }
    return *this;
  }

  constexpr ~Expected() { destroy(); }

  constexpr bool has_value() const noexcept { return has_value_; }
  constexpr explicit operator bool() const noexcept { return has_value_; }

  constexpr T& value() & noexcept { return assert(has_value_), value_; }
  constexpr const T& value() const& noexcept { return assert(has_value_), value_; }
  constexpr T&& value() && noexcept { return assert(has_value_), std::move(value_); }
  constexpr T& operator*() & noexcept { return value(); }
  constexpr const T& operator*() const& noexcept { return value(); }
  constexpr T&& operator*() && noexcept { return std::move(*this).value(); }
  constexpr T* operator->() noexcept { return &value(); }
  constexpr const T* operator->() const noexcept { return &value(); }

  constexpr E& error() & noexcept { return assert(!has_value_), error_; }
  constexpr const E& error() const& noexcept { return assert(!has_value_), error_; }
  constexpr E&& error() && noexcept { return assert(!has_value_), std::move(error_); }

  template <class U>
  constexpr T value_or(U&& fallback) const& {
    return has_value_ ? value_ : static_cast<T>(std::forward<U>(fallback));
  }

 private:
  constexpr void destroy() noexcept {
    if (has_value_) {
      std::destroy_at(&value_);
    } else {
      std::destroy_at(&error_);
    }
  }

  union {
    T value_;
    E error_;
  };
  bool has_value_;
};

// Expected<void, E>: success carries nothing.
template <class E>
class [[nodiscard]] Expected<void, E> {
 public:
  using value_type = void;
  using error_type = E;

  constexpr Expected() noexcept = default;
  template <class G>
  requires std::is_constructible_v<E, G&&>
  constexpr Expected(Unexpected<G> u)  // NOLINT
      : error_(std::move(u).error()), has_value_(false) {}

  constexpr bool has_value() const noexcept { return has_value_; }
  constexpr explicit operator bool() const noexcept { return has_value_; }
  constexpr void value() const noexcept { assert(has_value_); }
  constexpr void operator*() const noexcept { assert(has_value_); }
  constexpr const E& error() const& noexcept { return assert(!has_value_), error_; }
  constexpr E&& error() && noexcept { return assert(!has_value_), std::move(error_); }

 private:
  E error_{};
  bool has_value_ = true;
};

}  // namespace bulwark

#endif  // BULWARK_EXPECTED_H_
