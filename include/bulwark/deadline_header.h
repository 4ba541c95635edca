// bulwark/deadline_header.h — a request's deadline carried across services in a header.
//
// A deadline is only useful if the service called learns it: a caller that will give up
// in 850 ms gains nothing from a server that works on for 2 s. The client side writes the
// time it has left (http::Config::deadline_header does it on every attempt); the server
// side reads it into the request's Context, less a margin for the request's time on the
// wire and the answer's way back:
//
//   // client: "X-Request-Timeout: 850m"
//   headers.push_back({"X-Request-Timeout", bulwark::format_timeout_header(ctx.remaining())});
//
//   // server: the request's deadline is the earlier of its own and the caller's
//   auto ctx = bulwark::Context(clock).with_timeout(1s);
//   if (auto d = bulwark::parse_deadline_header(value, 5ms, bulwark::now_ticks(clock)))
//     ctx = ctx.with_deadline(*d);
//   else
//     log("ignoring X-Request-Timeout: ", to_string(d.error()));  // the own deadline stands
//
// Format (DeadlineHeaderFormat::grpc_timeout, gRPC's grpc-timeout): an integer of 1 to 8
// ASCII digits followed by one unit, H (hours), M (minutes), S (seconds), m (milli-),
// u (micro-) or n (nanoseconds): "850m", "30S", "1500000u". Surrounding spaces and tabs
// are ignored; nothing else is accepted (no sign, no fraction, no second unit). Zero is
// valid and means the caller has no time left: the deadline is `now`, already expired.
// DeadlineHeaderFormat::milliseconds is the integer alone (1 to 8 digits), in ms.
//
// The value is a duration, not an instant (the hosts' clocks need not agree), measured
// when the request leaves: writing truncates (never rounds up), so it is never more than
// the caller had left then. The time the request then spends on its way is not in it,
// so a reader's deadline (its receipt + the value) runs late by that transit time: the
// margin is there to cover it. Reading never extends the server's own limit when the
// caller combines with with_deadline() (the earlier wins); a malformed value is an error naming the
// problem, for the caller to log and ignore. Cost: a few comparisons, no allocation (formatting
// returns a short std::string). Thread-safety: pure functions.

#ifndef BULWARK_DEADLINE_HEADER_H_
#define BULWARK_DEADLINE_HEADER_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "bulwark/clock.h"
#include "bulwark/context.h"
#include "bulwark/expected.h"

namespace bulwark {

enum class DeadlineHeaderFormat : std::uint8_t {
  grpc_timeout,  // "850m": 1-8 digits and a unit (H M S m u n)
  milliseconds,  // "850": 1-8 digits, milliseconds
};

enum class DeadlineHeaderError : std::uint8_t {
  empty,            // nothing but spaces
  negative,         // a leading '-'
  not_a_number,     // no digits, or a character that is neither a digit nor the unit
  too_many_digits,  // more than 8 digits
  missing_unit,     // grpc_timeout: digits without a unit
  unknown_unit,     // grpc_timeout: a unit other than H M S m u n (or text after it)
  too_large,        // beyond what a Nanos holds (over 2562047H, about 292 years)
};

// "empty", "negative", ...: what was wrong, for a log line.
std::string_view to_string(DeadlineHeaderError e) noexcept;

// The timeout the header says, or what is wrong with it.
Expected<Nanos, DeadlineHeaderError> parse_timeout_header(
    std::string_view value,
    DeadlineHeaderFormat format = DeadlineHeaderFormat::grpc_timeout) noexcept;

// The deadline the header says, read at `now` (a reading of the clock the Context will
// use) less `margin` (>= 0; the request's transit and the answer's way back, a few ms
// on a LAN): now + max(0, timeout
// - margin). Combine with the server's own: ctx.with_deadline(deadline).
Expected<Deadline, DeadlineHeaderError> parse_deadline_header(
    std::string_view value, Nanos margin, Ticks now,
    DeadlineHeaderFormat format = DeadlineHeaderFormat::grpc_timeout) noexcept;

// `remaining` as the header's value, truncated: grpc_timeout uses milliseconds ("850m")
// when at least 1 ms is left, else microseconds or nanoseconds, and a coarser unit when
// 8 digits are not enough; negative is "0". Allocates the short string.
std::string format_timeout_header(Nanos remaining,
                                  DeadlineHeaderFormat format = DeadlineHeaderFormat::grpc_timeout);

}  // namespace bulwark

#endif  // BULWARK_DEADLINE_HEADER_H_
