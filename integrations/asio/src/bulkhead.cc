#include "bulwark/asio/bulkhead.h"

#include <string>

namespace bulwark::asio {

Expected<void, ConfigError> validate(const AsyncBulkheadConfig& c) {
  auto fail = [&](std::string field, std::string message) {
    return Unexpected(
        ConfigError{"async bulkhead '" + c.name + "'", std::move(field), std::move(message)});
  };
  if (c.name.empty()) return fail("name", "must not be empty");
  if (c.max_concurrent < 1) return fail("max_concurrent", "must be at least 1 (got 0)");
  if (c.max_wait < Nanos::zero()) {
    return fail("max_wait",
                "must not be negative (got " + bulwark::detail::format_duration(c.max_wait) + ")");
  }
  if (c.max_queue > 0 && c.max_wait == Nanos::zero()) {
    return fail("max_wait", "must be positive when max_queue is not 0 (a waiter could not wait)");
  }
  return {};
}

}  // namespace bulwark::asio
