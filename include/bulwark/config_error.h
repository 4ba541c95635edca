// bulwark/config_error.h — the error every bulwark configuration check returns.
//
// Configuration is validated once, when a component is built, and a bad value is an
// error that names the field and says what was wrong, never a silent default:
//
//   auto checked = bulwark::validate(config);
//   if (!checked) std::cerr << checked.error().to_string() << "\n";
//   // circuit breaker 'reviews': open_growth.multiplier must be a finite number >= 1 (got 0.5)
//
// Constructors that receive an invalid configuration throw `InvalidConfig` (which
// carries the same ConfigError); under -fno-exceptions they print it and abort, so
// code built that way validates first.

#ifndef BULWARK_CONFIG_ERROR_H_
#define BULWARK_CONFIG_ERROR_H_

#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>

namespace bulwark {

struct ConfigError {
  std::string component;  // e.g. "circuit breaker 'reviews'"
  std::string field;      // the offending field, by its configuration name
  std::string message;    // what is wrong with it, including the value

  std::string to_string() const { return component + ": " + field + " " + message; }
};

#if defined(__cpp_exceptions)
class InvalidConfig : public std::invalid_argument {
 public:
  explicit InvalidConfig(ConfigError e)
      : std::invalid_argument(e.to_string()), error_(std::move(e)) {}
  const ConfigError& error() const noexcept { return error_; }

 private:
  ConfigError error_;
};
#endif

namespace detail {
// Throws InvalidConfig, or prints the error and aborts without exceptions.
[[noreturn]] void raise_config_error(ConfigError error);
// Returns `config` if its validate() overload (found by argument-dependent lookup)
// accepts it; else raises the error, which names the field. What every constructor
// taking a configuration runs first.
template <class Config>
Config validated(Config config) {
  if (auto ok = validate(config); !ok) raise_config_error(std::move(ok).error());
  return config;
}
// A duration as a person writes it in a configuration: "30s", "1.5s", "250ms", "2h".
std::string format_duration(std::chrono::nanoseconds d);
}  // namespace detail

}  // namespace bulwark

#endif  // BULWARK_CONFIG_ERROR_H_
