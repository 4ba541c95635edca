// bulwark/lab/duration.h — durations as people write them in configuration files.
//
//   parse_duration("800ms")    -> 800 ms        parse_duration("1.5s")   -> 1500 ms
//   parse_duration("2min")     -> 120 s         parse_duration("1h30min") -> 5400 s
//   parse_duration("2min 30s") -> 150 s         (the reports' "6min 9s" reads back)
//   parse_duration("30")       -> error: no unit ("30s"? "30ms"?)
//   format_duration(1500ms)    -> "1.5s"
//
// Units: ns, us, ms, s, min, h. A duration is one or more <number><unit> parts (the
// number may have a decimal fraction), added up, written together ("1h30min") or
// separated by spaces ("1h 30min"); never a space inside a part ("30 s"), before the
// first or after the last. Never negative, and at most ~292 years (the range of 64-bit
// nanoseconds). "m" is refused as ambiguous: write "min" or "ms".
// Pure functions; no allocation except for the strings returned.

#ifndef BULWARK_LAB_DURATION_H_
#define BULWARK_LAB_DURATION_H_

#include <string>
#include <string_view>

#include "bulwark/clock.h"
#include "bulwark/expected.h"

namespace bulwark::lab {

// The duration `text` denotes, or a sentence saying what is wrong with it (without the
// field's name, which the caller knows).
Expected<Nanos, std::string> parse_duration(std::string_view text);

// The shortest exact form in the largest unit that keeps at most three decimals:
// "800ms", "1.5s", "2min", "1h", "250us", "0s". Negative durations get a "-".
std::string format_duration(Nanos d);

}  // namespace bulwark::lab

#endif  // BULWARK_LAB_DURATION_H_
