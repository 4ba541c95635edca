#include "bulwark/retry_budget.h"

#include <cmath>
#include <string>

namespace bulwark {

Expected<void, ConfigError> validate(const RetryBudgetConfig& c) {
  auto fail = [&](std::string field, std::string message) {
    return Unexpected(
        ConfigError{"retry budget '" + c.name + "'", std::move(field), std::move(message)});
  };
  // Tokens are kept as int64 millionths: 1e12 tokens is far beyond any sensible
  // setting and far below the overflow.
  constexpr double kMaxTokens = 1e12;
  if (c.name.empty()) return fail("name", "must not be empty");
  if (!std::isfinite(c.ratio) || c.ratio < 0.0 || c.ratio > kMaxTokens) {
    return fail("ratio",
                "must be a finite number between 0 and 1e12 (got " + std::to_string(c.ratio) + ")");
  }
  if (!std::isfinite(c.min_retries_per_second) || c.min_retries_per_second < 0.0 ||
      c.min_retries_per_second > kMaxTokens) {
    return fail("min_retries_per_second", "must be a finite number between 0 and 1e12 (got " +
                                              std::to_string(c.min_retries_per_second) + ")");
  }
  if (!std::isfinite(c.max_tokens) || c.max_tokens < 1.0 || c.max_tokens > kMaxTokens) {
    return fail("max_tokens", "must be a finite number between 1 and 1e12 (got " +
                                  std::to_string(c.max_tokens) + ")");
  }
  return {};
}

}  // namespace bulwark
