// Checks the lab harnesses share: what every InputError must be.

#ifndef BULWARK_TESTS_FUZZ_LAB_CHECKS_H_
#define BULWARK_TESTS_FUZZ_LAB_CHECKS_H_

#include <string_view>

#include "bulwark/lab/input_error.h"
#include "fuzz_support.h"

namespace bulwark::fuzz {

// A clear error: one short line, nothing a terminal would obey, at least a message.
inline void check_error(const lab::InputError& e) {
  const std::string_view what = e.what();
  check(!e.message().empty(), "an error says what is wrong");
  check(!has_control_bytes(what) && what.find('\n') == std::string_view::npos,
        "an error holds no control byte and no line break");
  check(what.size() <= 2048, "an error is short (echoed input is cut)");
}

}  // namespace bulwark::fuzz

#endif  // BULWARK_TESTS_FUZZ_LAB_CHECKS_H_
