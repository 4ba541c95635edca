#include "bulwark/registry.h"

#include <bit>
#include <chrono>

namespace bulwark::detail {

Expected<void, ConfigError> validate_registry(const std::string& name, std::uint32_t shards,
                                              Nanos idle_ttl, std::uint32_t evict_batch) {
  const std::string component = "registry '" + name + "'";
  auto fail = [&](std::string field, std::string message) {
    return Unexpected(ConfigError{component, std::move(field), std::move(message)});
  };
  if (name.empty()) return fail("name", "must not be empty");
  if (shards == 0 || shards > 1024 || !std::has_single_bit(shards)) {
    return fail("shards",
                "must be a power of two between 1 and 1024 (got " + std::to_string(shards) + ")");
  }
  if (idle_ttl < Nanos::zero()) {
    return fail("idle_ttl",
                "must not be negative (got " + std::to_string(idle_ttl.count()) + "ns)");
  }
  if (idle_ttl > Nanos::zero() && idle_ttl < std::chrono::milliseconds(1)) {
    return fail("idle_ttl", "must be zero (never evict) or at least 1ms (got " +
                                std::to_string(idle_ttl.count()) +
                                "ns): idle time is kept in ~1ms units");
  }
  if (evict_batch == 0 || evict_batch > (1u << 20)) {
    return fail("evict_batch",
                "must be between 1 and 1048576 (got " + std::to_string(evict_batch) + ")");
  }
  return {};
}

}  // namespace bulwark::detail
