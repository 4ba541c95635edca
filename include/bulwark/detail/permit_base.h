// Internal: the move-only right every bulwark permit is. Not part of the public API.
//
// A breaker permit, a bulkhead slot, a retry-budget ticket and an event subscription are
// all the same thing: a right held against an owner, settled exactly once — by the
// holder (a breaker permit's record(), a ticket's commit()), or else when the right is
// destroyed or overwritten, which abandons it (a cancelled call, a slot given back, a
// token refunded, a listener removed). PermitBase holds the owner and the right's data,
// moves them, and abandons what is left; the public types add their verbs on top.
//
//   struct Traits {
//     using Owner = MyPool;                  // what the right is held against
//     struct Data {};                        // what it remembers (may be empty)
//     static void abandon(Owner&, const Data&) noexcept;
//   };
//   class Slot : public detail::PermitBase<Traits> { ... };
//
// Cost: a pointer and the data; moving is two stores; nothing virtual.

#ifndef BULWARK_DETAIL_PERMIT_BASE_H_
#define BULWARK_DETAIL_PERMIT_BASE_H_

#include <utility>

namespace bulwark::detail {

template <class Traits>
class PermitBase {
 public:
  using Owner = typename Traits::Owner;
  using Data = typename Traits::Data;

  PermitBase(PermitBase&& o) noexcept : owner_(std::exchange(o.owner_, nullptr)), data_(o.data_) {}
  PermitBase& operator=(PermitBase&& o) noexcept {
    if (this != &o) {
      abandon();
      owner_ = std::exchange(o.owner_, nullptr);
      data_ = o.data_;
    }
    return *this;
  }
  PermitBase(const PermitBase&) = delete;
  PermitBase& operator=(const PermitBase&) = delete;
  ~PermitBase() { abandon(); }

  // True while the right has not been settled or abandoned.
  bool active() const noexcept { return owner_ != nullptr; }

 protected:
  constexpr PermitBase() noexcept = default;
  PermitBase(Owner* owner, Data data) noexcept : owner_(owner), data_(data) {}

  // Ends the right and returns its owner, for the holder to settle with; nullptr if it
  // had already ended.
  Owner* take() noexcept { return std::exchange(owner_, nullptr); }
  const Data& data() const noexcept { return data_; }
  // Ends the right without settling it (what destruction does).
  void abandon() noexcept {
    if (Owner* o = take()) Traits::abandon(*o, data_);
  }

 private:
  Owner* owner_ = nullptr;
  [[no_unique_address]] Data data_{};
};

}  // namespace bulwark::detail

#endif  // BULWARK_DETAIL_PERMIT_BASE_H_
