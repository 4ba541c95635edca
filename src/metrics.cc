#include "bulwark/metrics.h"

namespace bulwark {

void ComponentReading::merge_counters(const ComponentReading& o) noexcept {
  has_fallback = has_fallback || o.has_fallback;
  for (std::size_t i = 0; i < fallbacks.size(); ++i) fallbacks[i] += o.fallbacks[i];
  has_retry = has_retry || o.has_retry;
  for (std::size_t i = 0; i < retry_calls.size(); ++i) retry_calls[i] += o.retry_calls[i];
  retries += o.retries;
  retry_budget_exhausted += o.retry_budget_exhausted;
  has_budget = has_budget || o.has_budget;
  has_bulkhead = has_bulkhead || o.has_bulkhead;
  bulkhead_rejected += o.bulkhead_rejected;
}

void ComponentReading::merge(const ComponentReading& o) noexcept {
  merge_counters(o);
  budget_tokens += o.budget_tokens;
  bulkhead_in_use += o.bulkhead_in_use;
  bulkhead_max += o.bulkhead_max;
}

void ComponentCounters::read_into(ComponentReading& r) const noexcept {
  const std::uint32_t used = used_.load(std::memory_order_relaxed);
  if ((used & kFallbackBit) != 0) {
    r.has_fallback = true;
    for (std::size_t i = 0; i < fallbacks_.size(); ++i)
      r.fallbacks[i] += fallbacks_[i].load(std::memory_order_relaxed);
  }
  if ((used & kRetryBit) != 0) {
    r.has_retry = true;
    for (std::size_t i = 0; i < retry_calls_.size(); ++i) {
      r.retry_calls[i] += retry_calls_[i].load(std::memory_order_relaxed);
    }
    r.retries += retries_.load(std::memory_order_relaxed);
    r.retry_budget_exhausted += budget_exhausted_.load(std::memory_order_relaxed);
  }
  if ((used & kBulkheadBit) != 0) {
    r.has_bulkhead = true;
    // A release may be counted before its acquire is visible: never show a negative.
    const std::int64_t in_use = bulkhead_in_use_.load(std::memory_order_relaxed);
    r.bulkhead_in_use += in_use > 0 ? static_cast<std::uint64_t>(in_use) : 0;
    r.bulkhead_rejected += bulkhead_rejected_.load(std::memory_order_relaxed);
  }
}

void ComponentCounters::reset() noexcept {
  used_.store(0, std::memory_order_relaxed);
  for (auto& c : fallbacks_) c.store(0, std::memory_order_relaxed);
  for (auto& c : retry_calls_) c.store(0, std::memory_order_relaxed);
  retries_.store(0, std::memory_order_relaxed);
  budget_exhausted_.store(0, std::memory_order_relaxed);
  bulkhead_in_use_.store(0, std::memory_order_relaxed);
  bulkhead_rejected_.store(0, std::memory_order_relaxed);
}

}  // namespace bulwark
