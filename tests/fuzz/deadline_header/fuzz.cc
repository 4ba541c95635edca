// The deadline header (deadline_header.h) as a caller writes it: any bytes. A value that
// parses is a non-negative timeout whose deadline is never before `now`, never "never",
// and never later than now + timeout; formatting it and parsing again gives a value no
// larger (truncation); one that does not parse has an error with a name.

#include <cstdint>
#include <string>
#include <string_view>

#include "bulwark/deadline_header.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace bulwark;
  using fuzz::check;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  constexpr Ticks kNow = 1'000'000'000'000;
  for (const auto format :
       {DeadlineHeaderFormat::grpc_timeout, DeadlineHeaderFormat::milliseconds}) {
    const auto t = parse_timeout_header(text, format);
    const auto d = parse_deadline_header(text, Nanos(5'000'000), kNow, format);
    check(t.has_value() == d.has_value(), "timeout and deadline agree");
    if (t) {
      check(*t >= Nanos::zero(), "a timeout is never negative");
      check(!d->is_never(), "a header never gives 'never'");
      check(d->ticks() >= kNow, "a deadline is never in the past");
      check(d->ticks() <= saturating_add(kNow, t->count()), "the margin never extends it");
      const auto again = parse_timeout_header(format_timeout_header(*t, format), format);
      check(again && *again <= *t, "formatting truncates and parses back");
    } else {
      check(t.error() == d.error(), "the same error");
      check(to_string(t.error()) != "unknown", "an error has a name");
    }
  }
  return 0;
}
