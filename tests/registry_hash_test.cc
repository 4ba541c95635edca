// How the registry hashes and prints keys (detail/registry_hash.h).

#include "bulwark/detail/registry_hash.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <string_view>

namespace {

struct Custom {
  int id;
};
void bulwark_key_text(const Custom& c, std::string& out) {
  out += "custom-" + std::to_string(c.id);
}

TEST(RegistryHash, TransparentStringHashAgreesAcrossStringTypes) {
  bulwark::KeyHash<std::string> h;
  const std::string s = "host-000001:443";
  EXPECT_EQ(h(s), h(std::string_view(s)));
  EXPECT_EQ(h(s), h("host-000001:443"));
  EXPECT_NE(h(s), h("host-000002:443"));
}

TEST(RegistryHash, Mix64SpreadsSmallIntegersOverEveryShardAndSlotBit) {
  std::set<std::uint64_t> low, high;
  for (std::uint64_t i = 0; i < 4096; ++i) {
    low.insert(bulwark::detail::mix64(i) & 0xff);
    high.insert(bulwark::detail::mix64(i) >> 56);
  }
  EXPECT_EQ(low.size(), 256u);
  EXPECT_EQ(high.size(), 256u);
}

TEST(RegistryHash, KeyTextForStringsIntegersAndCustomKeys) {
  const auto text = [](const auto& key) {
    std::string out;
    bulwark::append_key_text(out, key);
    return out;
  };
  EXPECT_EQ(text(std::string("a")), "a");
  EXPECT_EQ(text(42), "42");
  EXPECT_EQ(text(Custom{7}), "custom-7");
  std::string seen;
  bulwark::detail::with_key_text(Custom{3}, [&](std::string_view k) { seen = k; });
  EXPECT_EQ(seen, "custom-3");
}

TEST(RegistryHash, KeyHeapBytesCountsOnlyOutOfLineStrings) {
  EXPECT_EQ(bulwark::detail::key_heap_bytes(std::string("short")), 0u);
  const std::string long_key(100, 'x');
  EXPECT_GE(bulwark::detail::key_heap_bytes(long_key), 101u);
  EXPECT_EQ(bulwark::detail::key_heap_bytes(12345), 0u);
}

}  // namespace
