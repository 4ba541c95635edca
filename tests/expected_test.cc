// Expected: value or error, the monadic forms, and assignment that keeps the old content
// when building the new one throws.

#include "bulwark/expected.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>

namespace bulwark {
namespace {

struct Err {
  int code = 0;
  friend bool operator==(const Err&, const Err&) = default;
};

Expected<int, Err> parse(const std::string& s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
    return Unexpected(Err{1});
  return std::stoi(s);
}
Expected<int, Err> positive(int v) {
  if (v == 0) return Unexpected(Err{2});
  return v;
}

TEST(Expected, AndThenChainsAndStopsAtTheFirstError) {
  EXPECT_EQ(parse("21").and_then(positive).value(), 21);
  EXPECT_EQ(parse("0").and_then(positive).error().code, 2);
  EXPECT_EQ(parse("x").and_then(positive).error().code, 1);
  int calls = 0;
  auto r = parse("x").and_then([&](int v) -> Expected<int, Err> { return ++calls, v; });
  EXPECT_FALSE(r);
  EXPECT_EQ(calls, 0) << "and_then must not call f on an error";
}

TEST(Expected, TransformMapsTheValueAndMayReturnVoid) {
  const Expected<int, Err> e = parse("4");
  Expected<std::string, Err> s = e.transform([](int v) { return std::to_string(v * 2); });
  EXPECT_EQ(*s, "8");
  int seen = 0;
  Expected<void, Err> v = e.transform([&](int x) { seen = x; });
  EXPECT_TRUE(v);
  EXPECT_EQ(seen, 4);
  EXPECT_EQ(parse("").transform([](int x) { return x + 1; }).error().code, 1);
}

TEST(Expected, OrElseRecoversAndTransformErrorMapsTheError) {
  auto recovered = parse("x").or_else([](const Err& e) -> Expected<int, std::string> {
    return e.code == 1 ? Expected<int, std::string>(0)
                       : Expected<int, std::string>(Unexpected(std::string("no")));
  });
  EXPECT_EQ(*recovered, 0);
  auto kept = parse("7").or_else([](const Err&) -> Expected<int, Err> { return 0; });
  EXPECT_EQ(*kept, 7);
  Expected<int, std::string> named =
      parse("x").transform_error([](const Err& e) { return "error " + std::to_string(e.code); });
  EXPECT_EQ(named.error(), "error 1");
}

TEST(Expected, MoveOnlyValuesFlowThroughRvalueForms) {
  Expected<std::unique_ptr<int>, Err> p = std::make_unique<int>(5);
  auto doubled = std::move(p).transform([](std::unique_ptr<int> v) { return *v * 2; });
  EXPECT_EQ(*doubled, 10);
}

TEST(Expected, VoidSpecializationHasTheMonadicFormsToo) {
  Expected<void, Err> ok;
  Expected<void, Err> bad = Unexpected(Err{3});
  EXPECT_EQ(*ok.transform([] { return 1; }), 1);
  EXPECT_EQ(bad.transform([] { return 1; }).error().code, 3);
  EXPECT_EQ(*ok.and_then([]() -> Expected<int, Err> { return 2; }), 2);
  EXPECT_TRUE(bad.or_else([](const Err&) -> Expected<void, Err> { return {}; }));
  EXPECT_EQ(bad.transform_error([](const Err& e) { return e.code * 10; }).error(), 30);
  EXPECT_EQ(bad.error_or(Err{9}).code, 3);
  EXPECT_EQ(ok.error_or(Err{9}).code, 9);
}

TEST(Expected, Equality) {
  EXPECT_TRUE(parse("3") == 3);
  EXPECT_FALSE(parse("3") == 4);
  EXPECT_TRUE(parse("x") == Unexpected(Err{1}));
  EXPECT_TRUE(parse("3") == parse("3"));
  EXPECT_FALSE(parse("3") == parse("x"));
}

#if defined(__cpp_exceptions)
// Counts live objects, and can be told to throw when copied.
struct Tracked {
  static inline int live = 0;
  static inline bool throw_on_copy = false;
  int v;
  explicit Tracked(int x) : v(x) { ++live; }
  Tracked(const Tracked& o) : v(o.v) {
    if (throw_on_copy) throw std::runtime_error("copy");
    ++live;
  }
  Tracked(Tracked&& o) noexcept : v(o.v) { ++live; }
  Tracked& operator=(const Tracked& o) {
    if (throw_on_copy) throw std::runtime_error("copy");
    v = o.v;
    return *this;
  }
  Tracked& operator=(Tracked&&) noexcept = default;
  ~Tracked() { --live; }
};

// A value type whose copy may throw and whose move may throw too: the hardest case.
struct Fragile {
  static inline int live = 0;
  static inline bool throw_now = false;
  int v;
  explicit Fragile(int x) : v(x) { ++live; }
  Fragile(const Fragile& o) : v(o.v) {
    if (throw_now) throw std::runtime_error("copy");
    ++live;
  }
  Fragile(Fragile&& o) : v(o.v) {  // NOLINT: may throw on purpose
    if (throw_now) throw std::runtime_error("move");
    ++live;
  }
  Fragile& operator=(const Fragile&) = default;
  ~Fragile() { --live; }
};

TEST(Expected, AssigningAValueThatThrowsWhileCopyingKeepsTheOldError) {
  {
    Expected<Tracked, Err> target = Unexpected(Err{7});
    const Expected<Tracked, Err> source(std::in_place, 42);
    Tracked::throw_on_copy = true;
    EXPECT_THROW(target = source, std::runtime_error);
    Tracked::throw_on_copy = false;
    ASSERT_FALSE(target.has_value());
    EXPECT_EQ(target.error().code, 7) << "the old error must survive a failed assignment";
  }
  EXPECT_EQ(Tracked::live, 0) << "nothing destroyed twice, nothing leaked";
}

TEST(Expected, AssigningAnErrorOverAValueThatThrowsKeepsTheOldValue) {
  {
    // Error type whose copy throws; the value is nothrow-movable, so it is saved and
    // restored around the attempt.
    Expected<int, Tracked> target = 5;
    const Expected<int, Tracked> source = Unexpected(Tracked(1));
    Tracked::throw_on_copy = true;
    EXPECT_THROW(target = source, std::runtime_error);
    Tracked::throw_on_copy = false;
    ASSERT_TRUE(target.has_value());
    EXPECT_EQ(*target, 5);
  }
  EXPECT_EQ(Tracked::live, 0);
}

TEST(Expected, AFragileValueIsBuiltBeforeTheErrorIsDestroyed) {
  {
    Expected<Fragile, Err> target = Unexpected(Err{4});
    const Expected<Fragile, Err> source(std::in_place, 9);
    Fragile::throw_now = true;
    EXPECT_THROW(target = source, std::runtime_error);
    Fragile::throw_now = false;
    ASSERT_FALSE(target.has_value());
    EXPECT_EQ(target.error().code, 4);
    target = source;
    ASSERT_TRUE(target.has_value());
    EXPECT_EQ(target->v, 9);
  }
  EXPECT_EQ(Fragile::live, 0);
}
#endif

}  // namespace
}  // namespace bulwark
