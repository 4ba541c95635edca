// Internal: named fields of a packed 64-bit word. Not part of the public API.
//
// Several lock-free components keep what one decision must see together in one atomic
// 64-bit word (the breaker's state word, a window's head, in-flight slots, a registry
// entry's reference word). Each such word is described by a Layout of named Fields,
// whose shifts and widths are checked at compile time never to overlap:
//
//   using State = Field<0, 3>;
//   using Gen = Field<45, 19>;
//   using Closed = Layout<State, Gen>;          // static_assert: disjoint, within 64 bits
//   std::uint64_t w = Closed::make(State::value(2), Gen::value(7));
//   State::get(w) == 2;  w = Gen::set(w, 8);
//
// When a word is read differently in different states, each reading is its own Layout
// over the same fields, so every view is checked on its own and named.
//
// Everything is constexpr and compiles to shifts and masks.

#ifndef BULWARK_DETAIL_BITFIELD_H_
#define BULWARK_DETAIL_BITFIELD_H_

#include <cstdint>
#include <type_traits>

namespace bulwark::detail {

// `Width` bits starting at bit `Shift`, read as T (an unsigned integer, bool or enum).
template <unsigned Shift, unsigned Width, class T = std::uint64_t>
struct Field {
  static_assert(Width >= 1 && Width <= 64 && Shift < 64 && Shift + Width <= 64,
                "a field must lie within 64 bits");
  using type = T;
  static constexpr unsigned shift = Shift;
  static constexpr unsigned width = Width;
  static constexpr std::uint64_t max =
      Width == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << Width) - 1;
  static constexpr std::uint64_t mask = max << Shift;

  static constexpr T get(std::uint64_t word) noexcept {
    return static_cast<T>((word >> Shift) & max);
  }
  // `word` with this field replaced by `v`, truncated to the field's width.
  static constexpr std::uint64_t set(std::uint64_t word, T v) noexcept {
    return (word & ~mask) | ((static_cast<std::uint64_t>(v) & max) << Shift);
  }
  // `word` with this field replaced by min(v, max).
  static constexpr std::uint64_t set_saturated(std::uint64_t word, std::uint64_t v) noexcept {
    return (word & ~mask) | ((v < max ? v : max) << Shift);
  }
  // This field alone, holding `v` (for Layout::make).
  static constexpr std::uint64_t value(T v) noexcept { return set(0, v); }
};

template <class... F>
struct Layout {
 private:
  static constexpr bool disjoint() noexcept {
    std::uint64_t seen = 0;
    bool ok = true;
    ((ok = ok && (seen & F::mask) == 0, seen |= F::mask), ...);
    return ok;
  }

 public:
  static_assert(disjoint(), "fields of a packed word overlap");
  // The bits some field of this view uses.
  static constexpr std::uint64_t used = (std::uint64_t{0} | ... | F::mask);

  // Combines fields built with Field::value().
  template <class... V>
  static constexpr std::uint64_t make(V... parts) noexcept {
    return (std::uint64_t{0} | ... | static_cast<std::uint64_t>(parts));
  }
  // True if `G` is one of this view's fields.
  template <class G>
  static constexpr bool has = (std::is_same_v<G, F> || ...);
};

}  // namespace bulwark::detail

#endif  // BULWARK_DETAIL_BITFIELD_H_
