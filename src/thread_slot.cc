// Per-thread indices (include/bulwark/detail/thread_slot.h): claiming and giving back.
// None of this is on a call's common path.

#include "bulwark/detail/thread_slot.h"

#include <array>
#include <atomic>
#include <bit>

namespace bulwark::detail {

constinit thread_local std::uint32_t tls_thread_slot = 0;

namespace {

constexpr std::uint32_t kWords = 64;  // 4,096 indices
constinit std::array<std::atomic<std::uint64_t>, kWords> g_taken{};
constinit std::atomic<std::uint32_t> g_overflow{0};

// Gives the thread's index back at its exit (a later thread takes the lowest free one).
struct SlotOwner {
  std::uint32_t held = 0;  // index + 1 of a map bit, 0: none
  ~SlotOwner() {
    if (held == 0) return;
    const std::uint32_t i = held - 1;
    g_taken[i / 64].fetch_and(~(std::uint64_t{1} << (i % 64)), std::memory_order_release);
    held = 0;
  }
};
thread_local SlotOwner tls_slot_owner;

std::uint32_t claim() noexcept {
  for (std::uint32_t w = 0; w < kWords; ++w) {
    std::uint64_t taken = g_taken[w].load(std::memory_order_relaxed);
    while (~taken != 0) {
      const auto bit = static_cast<std::uint32_t>(std::countr_one(taken));
      if (g_taken[w].compare_exchange_weak(taken, taken | (std::uint64_t{1} << bit),
                                           std::memory_order_acquire, std::memory_order_relaxed)) {
        const std::uint32_t i = w * 64 + bit;
        tls_slot_owner.held = i + 1;
        return i;
      }
    }
  }
  // Every index is held: spread the extra threads round them.
  return g_overflow.fetch_add(1, std::memory_order_relaxed) % (kWords * 64);
}

}  // namespace

std::uint32_t claim_thread_slot() noexcept {
  const std::uint32_t i = claim();
  tls_thread_slot = i + 1;
  return i;
}

}  // namespace bulwark::detail
