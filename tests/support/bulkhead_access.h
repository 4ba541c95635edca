// Reads a striped bulkhead's stripes, for tests that check where its slots are
// (bulwark::detail::BulkheadTestAccess is declared a friend of BasicBulkhead).

#ifndef BULWARK_TESTS_SUPPORT_BULKHEAD_ACCESS_H_
#define BULWARK_TESTS_SUPPORT_BULKHEAD_ACCESS_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "bulwark/bulkhead.h"

namespace bulwark::detail {

struct BulkheadTestAccess {
  // The stripes (null when unstriped) and how many.
  template <class B>
  static const BulkheadStripe* stripes(const B& b) noexcept {
    return b.stripes_.get();
  }
  template <class B>
  static std::uint32_t stripe_count(const B& b) noexcept {
    return b.stripes_ == nullptr ? 1 : b.n_stripes_;
  }
  // Free slots of each stripe now.
  template <class B>
  static std::vector<std::uint32_t> available(const B& b) {
    std::vector<std::uint32_t> out;
    for (std::uint32_t i = 0; i < stripe_count(b); ++i) {
      out.push_back(b.stripes_[i].available.load(std::memory_order_relaxed));
    }
    return out;
  }
};

}  // namespace bulwark::detail

#endif  // BULWARK_TESTS_SUPPORT_BULKHEAD_ACCESS_H_
