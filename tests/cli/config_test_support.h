// What the policies-file tests (service_config_test, service_fleet_config_test) share:
// parsing a text as "svc.toml", checking the error a text gives, writing a temp file.

#ifndef BULWARK_TESTS_CLI_CONFIG_TEST_SUPPORT_H_
#define BULWARK_TESTS_CLI_CONFIG_TEST_SUPPORT_H_

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "bulwark/config/config.h"

namespace bulwark::testing {

// `text` parsed as the file "svc.toml", with `env` as the process environment.
inline config::Policies parse_policies(const std::string& text, const config::Environment& env) {
  return config::parse(text, "svc.toml", env);
}

// `text` fails to load, at `where` ("svc.toml:LINE:COL", or the variable), on `field`,
// with a message containing `says`.
inline void expect_config_error(const std::string& text, const config::Environment& env,
                                const std::string& where, const std::string& field,
                                const std::string& says) {
  try {
    (void)parse_policies(text, env);
    ADD_FAILURE() << "no error for:\n" << text;
  } catch (const config::ConfigError& e) {
    EXPECT_EQ(e.where().to_string(), where) << e.what();
    EXPECT_EQ(e.field(), field) << e.what();
    EXPECT_NE(e.message().find(says), std::string::npos) << e.what();
  }
}

// Writes `text` to a file named `name` in the test's temporary directory; its path.
inline std::string write_temp_file(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

}  // namespace bulwark::testing

#endif  // BULWARK_TESTS_CLI_CONFIG_TEST_SUPPORT_H_
