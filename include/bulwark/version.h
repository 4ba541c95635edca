// bulwark/version.h — which bulwark this is, at compile time and at run time.
//
// The macros are the version of the headers being compiled; bulwark::version() is the
// version of the library linked, so a program can check that the two agree:
//
//   #include <bulwark/version.h>
//   static_assert(BULWARK_VERSION_MAJOR == 0 && BULWARK_VERSION_MINOR >= 1);
//   if (bulwark::version() != BULWARK_VERSION_STRING) { /* headers and library differ */ }
//
// The numbers are project(VERSION) in CMakeLists.txt: configuring fails when the two
// disagree, so they cannot drift apart. Versions before 1.0 may change the API in a
// minor release; a patch release never does (the CMake package accepts the same
// MAJOR.MINOR, docs/install.md).

#ifndef BULWARK_VERSION_H_
#define BULWARK_VERSION_H_

#define BULWARK_VERSION_MAJOR 0
#define BULWARK_VERSION_MINOR 1
#define BULWARK_VERSION_PATCH 0
#define BULWARK_VERSION_STRING "0.1.0"

// One number that orders versions: MAJOR * 10000 + MINOR * 100 + PATCH.
#define BULWARK_VERSION \
  (BULWARK_VERSION_MAJOR * 10000 + BULWARK_VERSION_MINOR * 100 + BULWARK_VERSION_PATCH)

namespace bulwark {

// "MAJOR.MINOR.PATCH" of the library this program linked (BULWARK_VERSION_STRING as
// it was when the library was built). A static string: no allocation, thread-safe,
// valid for the whole program.
const char* version() noexcept;

}  // namespace bulwark

#endif  // BULWARK_VERSION_H_
