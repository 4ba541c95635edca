#include "bulwark/bulkhead.h"

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

}  // namespace bulwark
