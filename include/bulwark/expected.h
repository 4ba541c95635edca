// bulwark/expected.h — a value or the reason there is none.
//
// Everything that is part of normal operation — a breaker rejecting a call, a bulkhead
// being full, a retry budget running out — is reported as a value, never as an
// exception: those paths run thousands of times a second during an incident, must stay
// allocation-free, and the core must work under -fno-exceptions. `Expected<T, E>` is the
// subset of C++23 std::expected that bulwark needs, with the same names, so code written
// against it reads the same once it becomes an alias.
//
//   auto permit = breaker.try_acquire();          // Expected<Permit, Rejection>
//   if (!permit) return respond_503(permit.error().retry_after);
//   permit->record(Outcome::success);
//
//   // Monadic forms, as std::expected's:
//   Expected<int, Err> n = parse(s).and_then(check_range).transform([](int v) { return v * 2; });
//
// Accessing the value of an Expected that holds an error (or the reverse) is a
// precondition violation: it aborts in debug builds and is undefined otherwise, as with
// std::optional::operator*.
//
// Cost: sizeof(T or E) plus a bool; no allocation, ever. Assignment gives the strong
// guarantee where std::expected does: if constructing the new content throws, the old
// content is still there, intact.
//
// Thread-safety: a value type; concurrent reads are safe, writes need the usual care.

#ifndef BULWARK_EXPECTED_H_
#define BULWARK_EXPECTED_H_

#include <cassert>
#include <functional>
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

  template <class G>
  friend constexpr bool operator==(const Unexpected& a, const Unexpected<G>& b) {
    return a.error() == b.error();
  }

 private:
  E error_;
};

template <class E>
Unexpected(E) -> Unexpected<E>;

template <class T, class E>
class Expected;

namespace detail {

template <class X>
struct IsBulwarkExpected : std::false_type {};
template <class T, class E>
struct IsBulwarkExpected<Expected<T, E>> : std::true_type {};

// Replaces `*old` (of type Old, alive) by a New built from `args`, so that if building
// throws, `*old` is alive and unchanged (std::expected's reinit-expected).
template <class New, class Old, class... Args>
constexpr void reinit(New* fresh, Old* old, Args&&... args) {
  if constexpr (std::is_nothrow_constructible_v<New, Args...>) {
    std::destroy_at(old);
    std::construct_at(fresh, std::forward<Args>(args)...);
  } else if constexpr (std::is_nothrow_move_constructible_v<New>) {
    New tmp(std::forward<Args>(args)...);  // may throw: *old is untouched
    std::destroy_at(old);
    std::construct_at(fresh, std::move(tmp));
  } else {
    static_assert(std::is_nothrow_move_constructible_v<Old>,
                  "Expected assignment needs one side to be nothrow-move-constructible");
    Old saved(std::move(*old));
    std::destroy_at(old);
#if defined(__cpp_exceptions)
    try {
      std::construct_at(fresh, std::forward<Args>(args)...);
    } catch (...) {
      std::construct_at(old, std::move(saved));
      throw;
    }
#else
    std::construct_at(fresh, std::forward<Args>(args)...);
#endif
  }
}

}  // namespace detail

template <class T, class E>
class [[nodiscard]] Expected {
  static_assert(!std::is_reference_v<T> && !std::is_reference_v<E>);
  static_assert(!std::is_void_v<E>);

 public:
  using value_type = T;
  using error_type = E;
  using unexpected_type = Unexpected<E>;

  // A value: Expected<int, E> e = 3;
  template <class U = T>
  requires(std::is_constructible_v<T, U&&> && !std::is_same_v<std::remove_cvref_t<U>, Expected> &&
           !std::is_same_v<std::remove_cvref_t<U>, std::in_place_t> &&
           !detail::IsBulwarkExpected<std::remove_cvref_t<U>>::
               value) constexpr Expected(U&& value) noexcept(std::
                                                                 is_nothrow_constructible_v<
                                                                     T, U&&>)  // NOLINT
      : has_value_(true) {
    std::construct_at(&value_, std::forward<U>(value));
  }

  template <class... Args>
  constexpr explicit Expected(std::in_place_t, Args&&... args) : has_value_(true) {
    std::construct_at(&value_, std::forward<Args>(args)...);
  }

  // An error: Expected<int, E> e = Unexpected(E{...});
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

  constexpr Expected(const Expected& other) requires(
      std::is_copy_constructible_v<T>&& std::is_copy_constructible_v<E>)
      : has_value_(other.has_value_) {
    if (has_value_) {
      std::construct_at(&value_, other.value_);
    } else {
      std::construct_at(&error_, other.error_);
    }
  }

  // Strong guarantee: if building the new content throws, *this keeps its old content.
  constexpr Expected& operator=(Expected&& other) noexcept(
      std::is_nothrow_move_constructible_v<T>&& std::is_nothrow_move_constructible_v<E>&&
          std::is_nothrow_move_assignable_v<T>&& std::is_nothrow_move_assignable_v<E>) {
    assign(std::move(other));
    return *this;
  }
  constexpr Expected& operator=(const Expected& other) requires(
      std::is_copy_constructible_v<T>&& std::is_copy_constructible_v<E>) {
    assign(other);
    return *this;
  }

  constexpr ~Expected() {
    if (has_value_) {
      std::destroy_at(&value_);
    } else {
      std::destroy_at(&error_);
    }
  }

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
  template <class U>
  constexpr T value_or(U&& fallback) && {
    return has_value_ ? std::move(value_) : static_cast<T>(std::forward<U>(fallback));
  }
  template <class G = E>
  constexpr E error_or(G&& fallback) const& {
    return has_value_ ? static_cast<E>(std::forward<G>(fallback)) : error_;
  }

  // f(value) -> Expected<U, E>; an error passes through unchanged.
  template <class F>
  constexpr auto and_then(F&& f) & {
    return and_then_impl(*this, std::forward<F>(f));
  }
  template <class F>
  constexpr auto and_then(F&& f) const& {
    return and_then_impl(*this, std::forward<F>(f));
  }
  template <class F>
  constexpr auto and_then(F&& f) && {
    return and_then_impl(std::move(*this), std::forward<F>(f));
  }
  // f(value) -> U; gives Expected<U, E> (U may be void).
  template <class F>
  constexpr auto transform(F&& f) & {
    return transform_impl(*this, std::forward<F>(f));
  }
  template <class F>
  constexpr auto transform(F&& f) const& {
    return transform_impl(*this, std::forward<F>(f));
  }
  template <class F>
  constexpr auto transform(F&& f) && {
    return transform_impl(std::move(*this), std::forward<F>(f));
  }
  // f(error) -> Expected<T, G>; a value passes through unchanged.
  template <class F>
  constexpr auto or_else(F&& f) & {
    return or_else_impl(*this, std::forward<F>(f));
  }
  template <class F>
  constexpr auto or_else(F&& f) const& {
    return or_else_impl(*this, std::forward<F>(f));
  }
  template <class F>
  constexpr auto or_else(F&& f) && {
    return or_else_impl(std::move(*this), std::forward<F>(f));
  }
  // f(error) -> G; gives Expected<T, G>.
  template <class F>
  constexpr auto transform_error(F&& f) & {
    return transform_error_impl(*this, std::forward<F>(f));
  }
  template <class F>
  constexpr auto transform_error(F&& f) const& {
    return transform_error_impl(*this, std::forward<F>(f));
  }
  template <class F>
  constexpr auto transform_error(F&& f) && {
    return transform_error_impl(std::move(*this), std::forward<F>(f));
  }

  template <class U, class G>
  friend constexpr bool operator==(const Expected& a, const Expected<U, G>& b) {
    if (a.has_value() != b.has_value()) return false;
    return a.has_value() ? a.value() == b.value() : a.error() == b.error();
  }
  template <class U>
  requires(!detail::IsBulwarkExpected<U>::value) friend constexpr bool operator==(const Expected& a,
                                                                                  const U& v) {
    return a.has_value() && a.value() == v;
  }
  template <class G>
  friend constexpr bool operator==(const Expected& a, const Unexpected<G>& u) {
    return !a.has_value() && a.error() == u.error();
  }

 private:
  template <class Other>
  constexpr void assign(Other&& other) {
    using Fwd = std::conditional_t<std::is_lvalue_reference_v<Other>, const Expected&, Expected&&>;
    Fwd o = static_cast<Fwd>(other);
    if (this == &o) return;
    if (has_value_ && o.has_value_) {
      if constexpr (std::is_assignable_v<T&, decltype((static_cast<Fwd>(o).value_))>) {
        value_ = static_cast<Fwd>(o).value_;
      } else {
        detail::reinit(&value_, &value_, static_cast<Fwd>(o).value_);
      }
    } else if (!has_value_ && !o.has_value_) {
      if constexpr (std::is_assignable_v<E&, decltype((static_cast<Fwd>(o).error_))>) {
        error_ = static_cast<Fwd>(o).error_;
      } else {
        detail::reinit(&error_, &error_, static_cast<Fwd>(o).error_);
      }
    } else if (o.has_value_) {
      detail::reinit(&value_, &error_, static_cast<Fwd>(o).value_);
      has_value_ = true;
    } else {
      detail::reinit(&error_, &value_, static_cast<Fwd>(o).error_);
      has_value_ = false;
    }
  }

  template <class Self, class F>
  static constexpr auto and_then_impl(Self&& self, F&& f) {
    using R =
        std::remove_cvref_t<std::invoke_result_t<F, decltype(std::forward<Self>(self).value_)>>;
    static_assert(detail::IsBulwarkExpected<R>::value, "and_then: f must return an Expected");
    static_assert(std::is_same_v<typename R::error_type, E>,
                  "and_then: f must return an Expected with the same error type");
    if (self.has_value_) return std::invoke(std::forward<F>(f), std::forward<Self>(self).value_);
    return R(Unexpected<E>(std::forward<Self>(self).error_));
  }
  template <class Self, class F>
  static constexpr auto transform_impl(Self&& self, F&& f) {
    using U = std::remove_cv_t<std::invoke_result_t<F, decltype(std::forward<Self>(self).value_)>>;
    using R = Expected<U, E>;
    if (!self.has_value_) return R(Unexpected<E>(std::forward<Self>(self).error_));
    if constexpr (std::is_void_v<U>) {
      std::invoke(std::forward<F>(f), std::forward<Self>(self).value_);
      return R();
    } else {
      return R(std::in_place, std::invoke(std::forward<F>(f), std::forward<Self>(self).value_));
    }
  }
  template <class Self, class F>
  static constexpr auto or_else_impl(Self&& self, F&& f) {
    using R =
        std::remove_cvref_t<std::invoke_result_t<F, decltype(std::forward<Self>(self).error_)>>;
    static_assert(detail::IsBulwarkExpected<R>::value, "or_else: f must return an Expected");
    static_assert(std::is_same_v<typename R::value_type, T>,
                  "or_else: f must return an Expected with the same value type");
    if (self.has_value_) return R(std::in_place, std::forward<Self>(self).value_);
    return std::invoke(std::forward<F>(f), std::forward<Self>(self).error_);
  }
  template <class Self, class F>
  static constexpr auto transform_error_impl(Self&& self, F&& f) {
    using G = std::remove_cv_t<std::invoke_result_t<F, decltype(std::forward<Self>(self).error_)>>;
    using R = Expected<T, G>;
    if (self.has_value_) return R(std::in_place, std::forward<Self>(self).value_);
    return R(Unexpected<G>(std::invoke(std::forward<F>(f), std::forward<Self>(self).error_)));
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
  static_assert(!std::is_reference_v<E> && !std::is_void_v<E>);

 public:
  using value_type = void;
  using error_type = E;
  using unexpected_type = Unexpected<E>;

  constexpr Expected() noexcept : has_value_(true) {}
  constexpr explicit Expected(std::in_place_t) noexcept : has_value_(true) {}
  template <class G>
  requires std::is_constructible_v<E, G&&>
  constexpr Expected(Unexpected<G> u) noexcept(std::is_nothrow_constructible_v<E, G&&>)  // NOLINT
      : has_value_(false) {
    std::construct_at(&error_, std::move(u).error());
  }

  constexpr Expected(Expected&& other) noexcept(std::is_nothrow_move_constructible_v<E>)
      : has_value_(other.has_value_) {
    if (!has_value_) std::construct_at(&error_, std::move(other.error_));
  }
  constexpr Expected(const Expected& other) requires std::is_copy_constructible_v<E>
      : has_value_(other.has_value_) {
    if (!has_value_) std::construct_at(&error_, other.error_);
  }
  constexpr Expected& operator=(Expected&& other) noexcept(
      std::is_nothrow_move_constructible_v<E>&& std::is_nothrow_move_assignable_v<E>) {
    assign(std::move(other));
    return *this;
  }
  constexpr Expected& operator=(const Expected& other) requires std::is_copy_constructible_v<E> {
    assign(other);
    return *this;
  }
  constexpr ~Expected() {
    if (!has_value_) std::destroy_at(&error_);
  }

  constexpr bool has_value() const noexcept { return has_value_; }
  constexpr explicit operator bool() const noexcept { return has_value_; }
  constexpr void value() const noexcept { assert(has_value_); }
  constexpr void operator*() const noexcept { assert(has_value_); }
  constexpr E& error() & noexcept { return assert(!has_value_), error_; }
  constexpr const E& error() const& noexcept { return assert(!has_value_), error_; }
  constexpr E&& error() && noexcept { return assert(!has_value_), std::move(error_); }
  template <class G = E>
  constexpr E error_or(G&& fallback) const& {
    return has_value_ ? static_cast<E>(std::forward<G>(fallback)) : error_;
  }

  // f() -> Expected<U, E>.
  template <class F>
  constexpr auto and_then(F&& f) const& {
    using R = std::remove_cvref_t<std::invoke_result_t<F>>;
    static_assert(detail::IsBulwarkExpected<R>::value, "and_then: f must return an Expected");
    if (has_value_) return std::invoke(std::forward<F>(f));
    return R(Unexpected<E>(error_));
  }
  template <class F>
  constexpr auto and_then(F&& f) && {
    using R = std::remove_cvref_t<std::invoke_result_t<F>>;
    static_assert(detail::IsBulwarkExpected<R>::value, "and_then: f must return an Expected");
    if (has_value_) return std::invoke(std::forward<F>(f));
    return R(Unexpected<E>(std::move(error_)));
  }
  // f() -> U; gives Expected<U, E>.
  template <class F>
  constexpr auto transform(F&& f) const& {
    return transform_impl(*this, std::forward<F>(f));
  }
  template <class F>
  constexpr auto transform(F&& f) && {
    return transform_impl(std::move(*this), std::forward<F>(f));
  }
  // f(error) -> Expected<void, G>.
  template <class F>
  constexpr auto or_else(F&& f) const& {
    using R = std::remove_cvref_t<std::invoke_result_t<F, const E&>>;
    static_assert(detail::IsBulwarkExpected<R>::value, "or_else: f must return an Expected");
    if (has_value_) return R();
    return std::invoke(std::forward<F>(f), error_);
  }
  template <class F>
  constexpr auto or_else(F&& f) && {
    using R = std::remove_cvref_t<std::invoke_result_t<F, E&&>>;
    static_assert(detail::IsBulwarkExpected<R>::value, "or_else: f must return an Expected");
    if (has_value_) return R();
    return std::invoke(std::forward<F>(f), std::move(error_));
  }
  // f(error) -> G; gives Expected<void, G>.
  template <class F>
  constexpr auto transform_error(F&& f) const& {
    using G = std::remove_cv_t<std::invoke_result_t<F, const E&>>;
    if (has_value_) return Expected<void, G>();
    return Expected<void, G>(Unexpected<G>(std::invoke(std::forward<F>(f), error_)));
  }
  template <class F>
  constexpr auto transform_error(F&& f) && {
    using G = std::remove_cv_t<std::invoke_result_t<F, E&&>>;
    if (has_value_) return Expected<void, G>();
    return Expected<void, G>(Unexpected<G>(std::invoke(std::forward<F>(f), std::move(error_))));
  }

  template <class G>
  friend constexpr bool operator==(const Expected& a, const Expected<void, G>& b) {
    if (a.has_value() != b.has_value()) return false;
    return a.has_value() || a.error() == b.error();
  }
  template <class G>
  friend constexpr bool operator==(const Expected& a, const Unexpected<G>& u) {
    return !a.has_value() && a.error() == u.error();
  }

 private:
  template <class Other>
  constexpr void assign(Other&& other) {
    using Fwd = std::conditional_t<std::is_lvalue_reference_v<Other>, const Expected&, Expected&&>;
    Fwd o = static_cast<Fwd>(other);
    if (this == &o) return;
    if (!has_value_ && !o.has_value_) {
      if constexpr (std::is_assignable_v<E&, decltype((static_cast<Fwd>(o).error_))>) {
        error_ = static_cast<Fwd>(o).error_;
      } else {
        detail::reinit(&error_, &error_, static_cast<Fwd>(o).error_);
      }
    } else if (o.has_value_) {
      if (!has_value_) std::destroy_at(&error_);
      has_value_ = true;
    } else {
      std::construct_at(&error_, static_cast<Fwd>(o).error_);  // if it throws: still a value
      has_value_ = false;
    }
  }

  template <class Self, class F>
  static constexpr auto transform_impl(Self&& self, F&& f) {
    using U = std::remove_cv_t<std::invoke_result_t<F>>;
    using R = Expected<U, E>;
    if (!self.has_value_) return R(Unexpected<E>(std::forward<Self>(self).error_));
    if constexpr (std::is_void_v<U>) {
      std::invoke(std::forward<F>(f));
      return R();
    } else {
      return R(std::in_place, std::invoke(std::forward<F>(f)));
    }
  }

  union {
    E error_;
  };
  bool has_value_;
};

}  // namespace bulwark

#endif  // BULWARK_EXPECTED_H_
