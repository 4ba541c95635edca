// bulwark/detail/schedule_point.h — where a test's scheduler may switch threads.
//
// BULWARK_SCHEDULE_POINT("name") marks a place between two accesses to shared atomics
// (a load and the CAS that depends on it, one word's update and the next word's) where
// another thread's step could come in between. In every build it expands to nothing,
// unless the translation unit defines BULWARK_TEST_SCHEDULE_POINTS before including any
// bulwark header: then each point calls bulwark::detail::schedule_point(name), which
// that test defines (tests/support/schedule_explorer.h runs real threads one at a time
// and picks, at every point, which one goes on).
//
// Cost: none without the test macro (the expansion is an empty statement). A test that
// defines it must not link code built without it that uses the same inline functions
// (it would break the one-definition rule): such a test uses the windows directly and
// nothing of the compiled library.

#ifndef BULWARK_DETAIL_SCHEDULE_POINT_H_
#define BULWARK_DETAIL_SCHEDULE_POINT_H_

#if defined(BULWARK_TEST_SCHEDULE_POINTS)
namespace bulwark::detail {
// Defined by the test: called by the running thread at every point.
void schedule_point(const char* name) noexcept;
}  // namespace bulwark::detail
#define BULWARK_SCHEDULE_POINT(name) ::bulwark::detail::schedule_point(name)
#else
#define BULWARK_SCHEDULE_POINT(name) static_cast<void>(0)
#endif

#endif  // BULWARK_DETAIL_SCHEDULE_POINT_H_
