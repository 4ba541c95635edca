// The version macros agree with each other and with the library that was linked.
#include "bulwark/version.h"

#include <gtest/gtest.h>

#include <string>

namespace {

TEST(Version, StringIsTheThreeNumbers) {
  const std::string expected = std::to_string(BULWARK_VERSION_MAJOR) + "." +
                               std::to_string(BULWARK_VERSION_MINOR) + "." +
                               std::to_string(BULWARK_VERSION_PATCH);
  EXPECT_EQ(expected, BULWARK_VERSION_STRING);
}

TEST(Version, LinkedLibraryMatchesTheHeaders) {
  EXPECT_STREQ(bulwark::version(), BULWARK_VERSION_STRING);
}

TEST(Version, OrderingNumber) {
  EXPECT_EQ(BULWARK_VERSION,
            BULWARK_VERSION_MAJOR * 10000 + BULWARK_VERSION_MINOR * 100 + BULWARK_VERSION_PATCH);
}

}  // namespace
