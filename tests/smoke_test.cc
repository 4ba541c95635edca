#include <gtest/gtest.h>
#include "bulwark/circuit_breaker.h"
TEST(Smoke, Builds) { bulwark::CircuitBreaker b({}); EXPECT_EQ(b.state(), bulwark::State::closed); }
