#include "bulwark/bulkhead.h"

#include <atomic>
#include <bit>
#include <cstdint>
#include <string>

namespace bulwark {

Expected<void, ConfigError> validate(const BulkheadConfig& c) {
  auto fail = [&](std::string field, std::string message) {
    return Unexpected(
        ConfigError{"bulkhead '" + c.name + "'", std::move(field), std::move(message)});
  };
  if (c.name.empty()) return fail("name", "must not be empty");
  if (c.max_concurrent < 1) return fail("max_concurrent", "must be at least 1 (got 0)");
  if (c.max_wait < Nanos::zero()) {
    return fail("max_wait",
                "must not be negative (got " + detail::format_duration(c.max_wait) + ")");
  }
  if (c.stripes < 1 || c.stripes > kMaxBulkheadStripes) {
    return fail("stripes", "must be between 1 and " + std::to_string(kMaxBulkheadStripes) +
                               " (got " + std::to_string(c.stripes) + ")");
  }
  return {};
}

namespace detail {

constinit thread_local std::uint32_t tls_stripe_index = kNoStripeIndex;

namespace {

// Which indices live threads hold: the first kTrackedIndices are handed out lowest
// free first and freed at thread exit; past them (more live threads than that) an index
// is a plain count, never freed. Only the stripe a thread starts from depends on it.
constexpr std::uint32_t kIndexWords = 64;
constexpr std::uint32_t kTrackedIndices = kIndexWords * 64;
constinit std::atomic<std::uint64_t> g_held[kIndexWords]{};
constinit std::atomic<std::uint32_t> g_untracked{0};

// Frees this thread's index when it exits. The thread keeps the number (a striped call
// from a later thread_local destructor still works); only a new thread may share it.
struct IndexOwner {
  std::uint32_t index = kNoStripeIndex;
  ~IndexOwner() {
    if (index >= kTrackedIndices) return;
    g_held[index / 64].fetch_and(~(std::uint64_t{1} << (index % 64)), std::memory_order_release);
  }
};
thread_local IndexOwner tls_index_owner;

std::uint32_t take_lowest_free() noexcept {
  for (std::uint32_t w = 0; w < kIndexWords; ++w) {
    std::uint64_t held = g_held[w].load(std::memory_order_relaxed);
    while (held != ~std::uint64_t{0}) {
      const auto bit = static_cast<std::uint32_t>(std::countr_one(held));
      if (g_held[w].compare_exchange_weak(held, held | (std::uint64_t{1} << bit),
                                          std::memory_order_acquire, std::memory_order_relaxed)) {
        return w * 64 + bit;
      }
    }
  }
  return kTrackedIndices + g_untracked.fetch_add(1, std::memory_order_relaxed) % kTrackedIndices;
}

}  // namespace

std::uint32_t assign_stripe_index() noexcept {
  const std::uint32_t i = take_lowest_free();
  tls_index_owner.index = i;
  tls_stripe_index = i;
  return i;
}

}  // namespace detail

}  // namespace bulwark
