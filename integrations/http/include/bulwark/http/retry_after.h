// bulwark/http/retry_after.h — a strict parser for the HTTP Retry-After header.
//
// RFC 9110 §10.2.3 allows two forms: delay-seconds (one or more digits, nothing else)
// and an HTTP-date in the preferred IMF-fixdate form ("Sun, 06 Nov 1994 08:49:37 GMT").
// Surrounding spaces and tabs are trimmed; anything else — a sign, a fraction, a unit,
// the obsolete date forms, a weekday that does not match the date, a field out of
// range — is `invalid`. A value above `max_delay` is `too_large`: a server asking for
// an hour's silence is treated as hostile, not obeyed. A date in the past is a zero
// delay (retry now).
//
//   auto r = bulwark::http::parse_retry_after("120", std::chrono::system_clock::now(), 5min);
//   if (r.status == bulwark::http::RetryAfter::Status::ok) wait(r.delay);
//
// Cost: a single pass over the value, no allocation. Thread-safety: a pure function.

#ifndef BULWARK_HTTP_RETRY_AFTER_H_
#define BULWARK_HTTP_RETRY_AFTER_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "bulwark/clock.h"

namespace bulwark::http {

struct RetryAfter {
  enum class Status : std::uint8_t {
    ok,         // `delay` holds the wait the server asked for
    invalid,    // not a delay-seconds nor an IMF-fixdate
    too_large,  // well-formed, but longer than the caller's maximum
  };
  Status status = Status::invalid;
  Nanos delay = Nanos::zero();  // zero unless ok
};

// Parses `value` (a Retry-After field value). An HTTP-date is measured from `now`.
RetryAfter parse_retry_after(std::string_view value, std::chrono::system_clock::time_point now,
                             Nanos max_delay);

// Formats `t` as an IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"), to the second.
// For servers and tests that send a Retry-After date.
std::string format_http_date(std::chrono::system_clock::time_point t);

}  // namespace bulwark::http

#endif  // BULWARK_HTTP_RETRY_AFTER_H_
