// Internal: a registry shard's index. Not part of the public API.
//
// An open-addressing table with linear probing of 8-byte slots, each 0 (empty) or
// `tag << 32 | (index + 1)`: the upper 32 bits of the key's hash and the entry's index
// in the shard's arena. Readers probe with acquire loads and never lock; they compare
// the tag, then the entry's key. Writers (insert, erase, growth) are serialised by the
// shard's mutex. Growth copies into a table twice the size and publishes it; replaced
// tables are kept until the table is destroyed, as a reader may still be probing one
// (together they are smaller than the live table). Erasing moves later members of the
// cluster back (no tombstones); a reader may miss a moved key for an instant, so erase
// bumps `seq` to odd and back around the move, for readers that must tell a real miss
// from a moved slot (see registry.h, find()). The load factor stays at most 3/4.

#ifndef BULWARK_DETAIL_REGISTRY_TABLE_H_
#define BULWARK_DETAIL_REGISTRY_TABLE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace bulwark::detail {

class SlotTable {
 public:
  static constexpr std::size_t kInitialSlots = 8;

  static constexpr std::uint64_t slot(std::uint32_t tag, std::uint32_t index) noexcept {
    return (std::uint64_t{tag} << 32) | (std::uint64_t{index} + 1);
  }
  static constexpr std::uint32_t tag_of(std::uint64_t v) noexcept {
    return static_cast<std::uint32_t>(v >> 32);
  }
  static constexpr std::uint32_t index_of(std::uint64_t v) noexcept {
    return static_cast<std::uint32_t>(v) - 1;
  }

  SlotTable() : current_(std::make_unique<Slots>(kInitialSlots)) {
    published_.store(current_.get(), std::memory_order_release);
  }
  SlotTable(const SlotTable&) = delete;
  SlotTable& operator=(const SlotTable&) = delete;

  // Lock-free: calls visit(index) for each slot with this tag on the probe path, in
  // order, until visit returns true (then returns true) or the path ends (false).
  template <class Visit>
  bool probe(std::uint32_t tag, Visit&& visit) const {
    const Slots* t = published_.load(std::memory_order_acquire);
    std::size_t i = tag & t->mask;
    for (std::size_t n = 0; n <= t->mask; ++n, i = (i + 1) & t->mask) {
      const std::uint64_t v = t->slots[i].load(std::memory_order_acquire);
      if (v == 0) return false;
      if (tag_of(v) == tag && visit(index_of(v))) return true;
    }
    return false;
  }

  // Even while no erase is moving slots. Acquire.
  std::uint64_t seq() const noexcept { return seq_.load(std::memory_order_acquire); }

  // ---- under the owner's mutex ----

  // Adds a slot; the key must not be present. Grows first if the table would pass 3/4.
  void insert(std::uint32_t tag, std::uint32_t index) {
    if ((used_ + 1) * 4 > (current_->mask + 1) * 3) grow();
    Slots& t = *current_;
    std::size_t i = tag & t.mask;
    while (t.slots[i].load(std::memory_order_relaxed) != 0) i = (i + 1) & t.mask;
    t.slots[i].store(slot(tag, index), std::memory_order_release);
    ++used_;
  }

  // Slot position `i` of the live table (wraps), and its content.
  std::size_t capacity() const noexcept { return current_->mask + 1; }
  std::size_t wrap(std::size_t i) const noexcept { return i & current_->mask; }
  std::uint64_t at(std::size_t i) const noexcept {
    return current_->slots[i & current_->mask].load(std::memory_order_relaxed);
  }
  std::size_t size() const noexcept { return used_; }

  // The position of the first slot with this tag for which match(index) is true.
  template <class Match>
  bool locate(std::uint32_t tag, Match&& match, std::size_t& pos) const {
    const Slots& t = *current_;
    for (std::size_t i = tag & t.mask, n = 0; n <= t.mask; ++n, i = (i + 1) & t.mask) {
      const std::uint64_t v = t.slots[i].load(std::memory_order_relaxed);
      if (v == 0) return false;
      if (tag_of(v) == tag && match(index_of(v))) {
        pos = i;
        return true;
      }
    }
    return false;
  }

  // Empties slot `pos`, moving later members of its cluster back.
  void erase(std::size_t pos) noexcept {
    const std::uint64_t s = seq_.load(std::memory_order_relaxed);
    seq_.store(s + 1, std::memory_order_relaxed);  // ordered by the release stores below
    Slots& t = *current_;
    std::size_t hole = pos & t.mask;
    for (std::size_t j = (hole + 1) & t.mask;; j = (j + 1) & t.mask) {
      const std::uint64_t v = t.slots[j].load(std::memory_order_relaxed);
      if (v == 0) break;
      const std::size_t home = tag_of(v) & t.mask;
      const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (!stays) {
        t.slots[hole].store(v, std::memory_order_release);
        hole = j;
      }
    }
    t.slots[hole].store(0, std::memory_order_release);
    seq_.store(s + 2, std::memory_order_release);
    --used_;
  }

  // Bytes of slots, live and replaced.
  std::size_t bytes() const noexcept {
    return (current_->mask + 1 + retired_slots_) * sizeof(std::uint64_t);
  }
  std::size_t bookkeeping_bytes() const noexcept { return retired_.capacity() * sizeof(void*); }

 private:
  struct Slots {
    explicit Slots(std::size_t capacity)
        : mask(capacity - 1), slots(new std::atomic<std::uint64_t>[capacity]()) {}
    std::size_t mask;
    std::unique_ptr<std::atomic<std::uint64_t>[]> slots;
  };

  void grow() {
    retired_.reserve(retired_.size() + 1);
    auto next = std::make_unique<Slots>((current_->mask + 1) * 2);
    const Slots& old = *current_;
    for (std::size_t j = 0; j <= old.mask; ++j) {
      const std::uint64_t v = old.slots[j].load(std::memory_order_relaxed);
      if (v == 0) continue;
      std::size_t i = tag_of(v) & next->mask;
      while (next->slots[i].load(std::memory_order_relaxed) != 0) i = (i + 1) & next->mask;
      next->slots[i].store(v, std::memory_order_relaxed);
    }
    // Readers that load the new table see every slot written above.
    published_.store(next.get(), std::memory_order_release);
    retired_slots_ += current_->mask + 1;
    retired_.push_back(std::move(current_));
    current_ = std::move(next);
  }

  std::atomic<const Slots*> published_{nullptr};  // read by every lookup
  std::atomic<std::uint64_t> seq_{0};
  std::unique_ptr<Slots> current_;
  std::vector<std::unique_ptr<Slots>> retired_;
  std::size_t retired_slots_ = 0;
  std::size_t used_ = 0;
};

}  // namespace bulwark::detail

#endif  // BULWARK_DETAIL_REGISTRY_TABLE_H_
