#include "bulwark/retry.h"

#include <string>

namespace bulwark {
namespace {

RetryConfig checked(RetryConfig config) {
  if (auto ok = validate(config); !ok) detail::raise_config_error(std::move(ok).error());
  return config;
}

}  // namespace

Expected<void, ConfigError> validate(const RetryConfig& c) {
  const std::string component = "retry '" + c.name + "'";
  if (c.name.empty()) return Unexpected(ConfigError{component, "name", "must not be empty"});
  if (c.max_attempts < 1) {
    return Unexpected(ConfigError{component, "max_attempts", "must be at least 1 (got 0)"});
  }
  return c.backoff.validate(component, "backoff");
}

RetryPolicy::RetryPolicy(RetryConfig config) : config_(checked(std::move(config))) {}

}  // namespace bulwark
