#include "bulwark/bulkhead.h"

#include <sstream>
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
    std::ostringstream out;
    out << "must not be negative (got " << c.max_wait.count() << "ns)";
    return fail("max_wait", out.str());
  }
  return {};
}

}  // namespace bulwark
