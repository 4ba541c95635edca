// Internal: a registry's entry storage. Not part of the public API.
//
// SegmentedArray<T> hands out slots by 32-bit index from segments that double in size
// (segment k holds 8 << k slots), so a slot's address never changes and an index maps
// to its slot with one bit_width and one load, lock-free. Segments are freed only with
// the array: memory that held an entry keeps holding entries (type-stable), which is
// what lets a reader probe an entry that is being evicted and see it is dead.
// Slots are raw storage: the owner constructs and destroys what lives there.
// Growth (reserve) must be serialised by the owner; at() may run concurrently with it.
//
// SegmentDirectory answers "which entry is this address?" in O(1): segments are
// page-aligned, and each page of a segment is recorded in an open-addressing table
// (page number -> segment), so a breaker's address, as its transition event reports
// it, leads to its entry with one hash and usually one probe, whatever the number of
// keys; an address outside every segment (a breaker that is not the registry's) is
// recognised as such. At most ~21 bytes of table per 4 KiB page of entries (load <= 3/4).
//
// poison/unpoison mark memory that must not be touched for AddressSanitizer (no-ops
// without it), so a Handle used after its entry was evicted is reported.

#ifndef BULWARK_DETAIL_REGISTRY_ARENA_H_
#define BULWARK_DETAIL_REGISTRY_ARENA_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "bulwark/detail/registry_hash.h"

#if defined(__SANITIZE_ADDRESS__)
#define BULWARK_REGISTRY_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BULWARK_REGISTRY_ASAN 1
#endif
#endif
#if defined(BULWARK_REGISTRY_ASAN)
#include <sanitizer/asan_interface.h>
#endif

namespace bulwark::detail {

inline void poison(const void* p, std::size_t n) noexcept {
#if defined(BULWARK_REGISTRY_ASAN)
  ASAN_POISON_MEMORY_REGION(p, n);
#else
  (void)p;
  (void)n;
#endif
}
inline void unpoison(const void* p, std::size_t n) noexcept {
#if defined(BULWARK_REGISTRY_ASAN)
  ASAN_UNPOISON_MEMORY_REGION(p, n);
#else
  (void)p;
  (void)n;
#endif
}

inline constexpr std::size_t kArenaPage = 4096;

// Slot index -> segment geometry, shared by every SegmentedArray.
struct Segments {
  static constexpr std::size_t kFirstBits = 3;  // segment k holds 8 << k slots
  static constexpr std::size_t kMax = 29;       // 8 * (2^29 - 1) > 2^32 slots
  static constexpr std::size_t size(std::size_t k) noexcept {
    return std::size_t{1} << (k + kFirstBits);
  }
  static constexpr std::size_t base(std::size_t k) noexcept {
    return ((std::size_t{1} << k) - 1) << kFirstBits;
  }
  static constexpr std::size_t of(std::uint32_t index) noexcept {
    return static_cast<std::size_t>(
               std::bit_width((static_cast<std::size_t>(index) >> kFirstBits) + 1)) -
           1;
  }
};

template <class T, std::size_t Align = alignof(T)>
class SegmentedArray {
  static_assert(std::has_single_bit(Align) && Align >= alignof(T));

 public:
  static constexpr std::size_t kAlign = Align;

  SegmentedArray() = default;
  SegmentedArray(const SegmentedArray&) = delete;
  SegmentedArray& operator=(const SegmentedArray&) = delete;
  ~SegmentedArray() {
    for (std::size_t k = 0; k < Segments::kMax; ++k) {
      if (T* seg = segs_[k].load(std::memory_order_relaxed); seg != nullptr) {
        unpoison(seg, bytes(k));
        ::operator delete (seg, std::align_val_t{Align});
      }
    }
  }

  // The slot of `index`, whose segment must exist. Lock-free: one load.
  T* at(std::uint32_t index) const noexcept {
    const std::size_t k = Segments::of(index);
    return segs_[k].load(std::memory_order_acquire) + (index - Segments::base(k));
  }

  // The slot of `index`, allocating its segment if needed (then calls
  // on_segment(base, bytes, k) before publishing it). Serialised by the owner.
  template <class OnSegment>
  T* reserve(std::uint32_t index, OnSegment&& on_segment) {
    const std::size_t k = Segments::of(index);
    if (segs_[k].load(std::memory_order_relaxed) == nullptr) {
      void* raw = ::operator new (bytes(k), std::align_val_t{Align});
      on_segment(raw, bytes(k), k);
      segs_[k].store(static_cast<T*>(raw), std::memory_order_release);
    }
    return at(index);
  }
  T* reserve(std::uint32_t index) {
    return reserve(index, [](void*, std::size_t, std::size_t) {});
  }

  // Bytes segment k occupies (its slots, rounded up to the alignment).
  static constexpr std::size_t bytes(std::size_t k) noexcept {
    return (Segments::size(k) * sizeof(T) + Align - 1) / Align * Align;
  }

 private:
  std::array<std::atomic<T*>, Segments::kMax> segs_{};
};

// Page number -> the segment holding that page. Lookups are lock-free; add() takes
// the directory's mutex and may replace the table (old tables are kept until the
// directory is destroyed, for readers still probing them).
class SegmentDirectory {
 public:
  SegmentDirectory() : table_(new Table(64)) { current_ = table_.load(std::memory_order_relaxed); }
  SegmentDirectory(const SegmentDirectory&) = delete;
  SegmentDirectory& operator=(const SegmentDirectory&) = delete;
  ~SegmentDirectory() {
    delete current_;
    for (Table* t : retired_) delete t;
  }

  // Records the segment [base, base + bytes), page-aligned, as segment `k`.
  void add(const void* base, std::size_t bytes, std::size_t k) {
    const auto b = reinterpret_cast<std::uintptr_t>(base);
    const std::uint64_t value = b | k;  // k < 29 fits in the page offset
    std::lock_guard lock(mu_);
    for (std::uintptr_t p = b; p < b + bytes; p += kArenaPage) {
      if ((used_ + 1) * 4 > (current_->mask + 1) * 3) grow();
      put(*current_, p / kArenaPage + 1, value);
      ++used_;
    }
  }

  // The base and segment number of the segment holding `addr`; {nullptr, 0} if none.
  struct Found {
    const unsigned char* base = nullptr;
    std::size_t k = 0;
  };
  Found find(const void* addr) const noexcept {
    const std::uint64_t page = reinterpret_cast<std::uintptr_t>(addr) / kArenaPage + 1;
    const Table* t = table_.load(std::memory_order_acquire);
    for (std::size_t i = mix64(page) & t->mask;; i = (i + 1) & t->mask) {
      const std::uint64_t key = t->slots[i].key.load(std::memory_order_acquire);
      if (key == 0) return {};
      if (key == page) {
        const std::uint64_t v = t->slots[i].value.load(std::memory_order_relaxed);
        return {reinterpret_cast<const unsigned char*>(v & ~std::uint64_t{kArenaPage - 1}),
                static_cast<std::size_t>(v & (kArenaPage - 1))};
      }
    }
  }

  std::size_t bytes() const {
    std::lock_guard lock(mu_);
    std::size_t n = sizeof(Table) + (current_->mask + 1) * sizeof(Slot);
    for (const Table* t : retired_) n += sizeof(Table) + (t->mask + 1) * sizeof(Slot);
    return n;
  }

 private:
  struct Slot {
    std::atomic<std::uint64_t> key{0};  // page number + 1; 0: empty
    std::atomic<std::uint64_t> value{0};
  };
  struct Table {
    explicit Table(std::size_t n) : mask(n - 1), slots(new Slot[n]) {}
    std::size_t mask;
    std::unique_ptr<Slot[]> slots;
  };

  static void put(Table& t, std::uint64_t key, std::uint64_t value) noexcept {
    std::size_t i = mix64(key) & t.mask;
    while (t.slots[i].key.load(std::memory_order_relaxed) != 0) i = (i + 1) & t.mask;
    t.slots[i].value.store(value, std::memory_order_relaxed);
    t.slots[i].key.store(key, std::memory_order_release);
  }
  void grow() {
    retired_.reserve(retired_.size() + 1);  // so nothing throws once `next` is published
    auto* next = new Table((current_->mask + 1) * 2);
    for (std::size_t i = 0; i <= current_->mask; ++i) {
      const std::uint64_t key = current_->slots[i].key.load(std::memory_order_relaxed);
      if (key != 0) put(*next, key, current_->slots[i].value.load(std::memory_order_relaxed));
    }
    table_.store(next, std::memory_order_release);
    retired_.push_back(current_);
    current_ = next;
  }

  std::atomic<Table*> table_;
  mutable std::mutex mu_;
  Table* current_;               // == table_, under mu_
  std::vector<Table*> retired_;  // replaced tables a reader may still probe
  std::size_t used_ = 0;
};

}  // namespace bulwark::detail

#endif  // BULWARK_DETAIL_REGISTRY_ARENA_H_
