// Durations as people write them ("800ms", "1h30min", "2min 30s"), and the escaping
// every error applies to the text it echoes. A duration that parses is never negative
// and prints back to itself, and the spaces between its parts change nothing (the same
// text without them parses to the same value); one that does not gets a short,
// printable reason; escaped text holds no control byte and is cut.

#include <cstdint>
#include <string>
#include <string_view>

#include "bulwark/lab/duration.h"
#include "bulwark/lab/input_error.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace bulwark;
  using fuzz::check;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto d = lab::parse_duration(text);
  if (d) {
    check(*d >= Nanos::zero(), "a duration is never negative");
    const std::string shown = lab::format_duration(*d);
    const auto again = lab::parse_duration(shown);
    check(again && *again == *d, "a duration prints back to itself");
    std::string packed;
    for (char c : text) {
      if (c != ' ') packed += c;
    }
    const auto without = lab::parse_duration(packed);
    check(without && *without == *d, "spaces between parts change nothing");
  } else {
    check(!d.error().empty() && d.error().size() < 1024, "a short reason");
    check(!fuzz::has_control_bytes(d.error()), "a printable reason");
  }
  const std::string escaped = lab::escape_for_error(text);
  check(!fuzz::has_control_bytes(escaped) && escaped.find('\n') == std::string::npos,
        "escaped text holds no control byte");
  check(escaped.size() <= 4 * lab::kMaxEchoed + 3, "escaped text is cut");
  check(lab::quote_for_error(text).size() <= 4 * lab::kMaxEchoed + 40, "quoted text is cut");
  const std::string shown = lab::printable(text);
  check(!fuzz::has_control_bytes(shown) && shown.find('\n') == std::string::npos,
        "printable text holds no control byte");
  return 0;
}
