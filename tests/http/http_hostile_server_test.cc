// The HTTP client against a hostile server: every case scripts what a raw-socket
// server on 127.0.0.1 (hostile_server.h) sends — garbled status lines, malformed
// headers and framing, resets, a byte at a time, Retry-After in every shape,
// redirects — and asserts how the client classifies it: who is at fault (the caller,
// the server or the network), whether it was retried, and what the host's breaker
// counted. Each case runs for the synchronous Client and for the AsyncClient.
//
// Timing never decides a verdict: the only short timeouts are in the cases whose
// server is slower than any timeout (it trickles for seconds, or never answers), and
// no assertion reads a clock.

#include <gtest/gtest.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "bulwark/http/async_client.h"
#include "bulwark/http/client.h"
#include "bulwark/http/retry_after.h"
#include "hostile_server.h"

namespace bulwark::http {
namespace {

using namespace std::chrono_literals;
using bulwark::testing::Action;
using bulwark::testing::HostileServer;
using bulwark::testing::http_response;
using bulwark::testing::RawRequest;
using bulwark::testing::Script;
using bulwark::testing::Scripter;
using Result = Expected<Response, Error>;

// One server for the whole binary (two ports: two origins).
HostileServer& server() {
  static HostileServer s;
  return s;
}

enum class Fault { none, caller, server, network };
const char* name(Fault f) {
  switch (f) {
    case Fault::none:
      return "none";
    case Fault::caller:
      return "caller";
    case Fault::server:
      return "server";
    case Fault::network:
      return "network";
  }
  return "?";
}
// Who is at fault for an error, as client.h's "Classification" says: what the breaker
// ignores is the caller's; of the failures, transport and timeout are the network's,
// everything else the server's.
Fault fault_of(const Result& r) {
  if (r) return Fault::none;
  const Error& e = r.error();
  if (e.outcome() == Outcome::ignored) return Fault::caller;
  return e.kind == ErrorKind::transport || e.kind == ErrorKind::timeout ? Fault::network
                                                                        : Fault::server;
}

enum class Counted { success, failure, ignored };
const char* name(Counted c) {
  return c == Counted::success ? "success" : c == Counted::failure ? "failure" : "ignored";
}

struct Expect {
  std::optional<long> status;             // a response with this status (else an error)
  ErrorKind kind = ErrorKind::transport;  // the error's kind
  Fault fault = Fault::none;
  bool retried = false;                // the retry made a second attempt
  Counted breaker = Counted::success;  // what the first host's breaker counted, every call
  std::string message_has = {};        // a part of the error message
  std::uint64_t hostile_retry_after = 0;
  int hops = 0;  // redirects followed: the server sees hops + 1 (+ 1 if retried) requests
};

struct Case {
  std::string name;
  Scripter script;
  Expect expect;
  std::function<void(Config&)> config = {};
  std::function<Request()> request = {};  // default: GET /case on host 0
  // More checks: on the result and on the requests the server saw.
  std::function<void(const Result&, const std::vector<RawRequest>&)> check = {};
};

Scripter always(Script s) {
  return [s = std::move(s)](int, const RawRequest&) { return s; };
}
Scripter send(std::string bytes) { return always({Action::send(std::move(bytes))}); }
// The first answer `first`, every later one a 200 "ok".
Scripter then_ok(Script first) {
  return [first = std::move(first)](int n, const RawRequest&) {
    return n == 1 ? first : Script{Action::send(http_response(200, "OK", "ok"))};
  };
}
std::string with_body(std::string head_lines, const std::string& body = "ok") {
  return head_lines + "Content-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}
std::string status_503_retry_after(const std::vector<std::string>& values) {
  std::vector<std::string> headers;
  for (const auto& v : values) headers.push_back("Retry-After: " + v);
  return http_response(503, "Service Unavailable", "busy", headers);
}

Config base_config() {
  Config c;
  c.name = "hostile";
  c.breaker = {.name = "hostile", .consecutive_failures = 100, .open_duration = 1h};
  c.retry = RetryConfig{.name = "hostile", .max_attempts = 2, .backoff = Backoff::constant(1ms)};
  c.default_timeout = 20s;  // generous: only the slow cases below shorten it
  return c;
}
// For a server slower than any timeout: each attempt gets 150 ms.
void short_attempts(Config& c) { c.attempt_timeout = 150ms; }
void follow_redirects(Config& c) { c.max_redirects = 3; }

Expect protocol_error(std::string message_has = {}) {
  return {.status = {},
          .kind = ErrorKind::protocol,
          .fault = Fault::server,
          .retried = true,
          .breaker = Counted::failure,
          .message_has = std::move(message_has)};
}
Expect transport_error() {
  return {.status = {},
          .kind = ErrorKind::transport,
          .fault = Fault::network,
          .retried = true,
          .breaker = Counted::failure};
}
Expect timeout_error() {
  return {.status = {},
          .kind = ErrorKind::timeout,
          .fault = Fault::network,
          .retried = true,
          .breaker = Counted::failure};
}
Expect ok(long status = 200) { return {.status = status}; }
Expect ok_after_retry(std::uint64_t hostile = 0) {
  return {.status = 200, .retried = true, .hostile_retry_after = hostile};
}
// A valid Retry-After longer than the request's deadline: honoured, so the request
// ends at once (no retry) and hands the value over.
Expect retry_after_honoured() {
  return {.status = {},
          .kind = ErrorKind::status,
          .fault = Fault::server,
          .retried = false,
          .breaker = Counted::failure};
}

std::string header_value(const Response& r, std::string_view name) {
  return std::string(r.header(name).value_or("<none>"));
}

std::vector<Case> cases() {
  HostileServer& s = server();
  const std::string big_line(10u << 20, 'h');  // one 10 MB header line
  std::string many_headers;                    // 5,000 ordinary header lines, 100 KB in all
  for (int i = 0; i < 5000; ++i) many_headers += "X-H" + std::to_string(i) + ": abcdefghijklm\r\n";
  const auto past = format_http_date(std::chrono::system_clock::now() - 1h);
  // A date 300 days after the server answers (under a max_retry_after of a year): far
  // beyond the request's 10 s however long the client takes to read it.
  const Scripter date_ahead = [](int, const RawRequest&) {
    return Script{Action::send(status_503_retry_after(
        {format_http_date(std::chrono::system_clock::now() + std::chrono::days(300))}))};
  };

  std::vector<Case> v = {
      // --- Status lines: the server's answer is not HTTP/1.x. ---
      {"GarbageStatusLine", send("FOO BAR BAZ\r\n\r\n"), protocol_error("HTTP/0.9")},
      {"Http99", send(with_body("HTTP/9.9 200 OK\r\n")),
       protocol_error("Unsupported HTTP version")},
      {"Status000", send(with_body("HTTP/1.1 000 Zero\r\n")), protocol_error()},
      {"Status099", send(with_body("HTTP/1.1 099 Low\r\n")), protocol_error()},
      {"Status1000", send(with_body("HTTP/1.1 1000 Big\r\n")), protocol_error()},
      {"StatusNotDigits", send(with_body("HTTP/1.1 abc OK\r\n")), protocol_error()},
      {"Http09BodyWithoutHead", send("hello world\n"), protocol_error("HTTP/0.9")},
      {"BinaryGarbage", send(std::string("\x00\x01\x02\xff\xfe\x80\r\n\r\n", 10)),
       protocol_error()},
      {"EmptyReply", always({}), transport_error()},
      {"StatusLineCutShort", send("HTTP/1.1 200 O"), transport_error()},
      {"InterimResponseThenClose", send("HTTP/1.1 100 Continue\r\n\r\n"), transport_error()},
      {"StatusWithoutReasonIsValid", send(with_body("HTTP/1.1 200\r\n")), ok()},
      {"Status999IsAServerError",
       send(with_body("HTTP/1.1 999 Odd\r\n")),
       {.status = {},
        .kind = ErrorKind::status,
        .fault = Fault::server,
        .retried = true,
        .breaker = Counted::failure}},

      // --- Headers. ---
      {"HeaderWithoutColon", send(with_body("HTTP/1.1 200 OK\r\nBogus header line\r\n")),
       protocol_error()},
      {"HeaderWithNul", send(with_body(std::string("HTTP/1.1 200 OK\r\nX-A: a\0b\r\n", 27))),
       protocol_error()},
      {"HeaderNameWithSpace", send(with_body("HTTP/1.1 200 OK\r\nBad Name: x\r\n")),
       protocol_error()},
      {"ObsFoldIsUnfolded",
       send(with_body("HTTP/1.1 200 OK\r\nX-A: one\r\n  two\r\n")),
       ok(),
       {},
       {},
       [](const Result& r, const std::vector<RawRequest>&) {
         ASSERT_TRUE(r);
         EXPECT_EQ(header_value(*r, "X-A"), "one two");
       }},
      {"OneHugeHeaderLine",
       send(with_body("HTTP/1.1 200 OK\r\nX-Big: " + big_line + "\r\n")),
       {.status = {},
        .kind = ErrorKind::headers_too_large,
        .fault = Fault::server,
        .retried = false,
        .breaker = Counted::failure,
        .message_has = "max_header_bytes"}},
      {"ManyHeaders",
       send(with_body("HTTP/1.1 200 OK\r\n" + many_headers)),
       {.status = {},
        .kind = ErrorKind::headers_too_large,
        .fault = Fault::server,
        .retried = false,
        .breaker = Counted::failure,
        .message_has = "max_header_bytes"}},
      {"ConflictingContentLength",
       send("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok"),
       protocol_error("Content-Length")},
      {"RepeatedEqualContentLength",
       send("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok"), ok()},

      // --- Bodies. ---
      {"ShortContentLengthThenClose", send("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort"),
       transport_error()},
      {"BadChunkSize",
       send("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"),
       protocol_error("chunked")},
      {"ChunkSizeOverflow",
       send("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            "fffffffffffffffffffffff\r\nabc\r\n0\r\n\r\n"),
       protocol_error("chunked")},
      {"ChunkedBodyNeverEnds",
       send("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"),
       transport_error()},
      {"BodyOverTheCap",
       send(http_response(200, "OK", std::string(4000, 'b'))),
       {.status = {},
        .kind = ErrorKind::body_too_large,
        .fault = Fault::server,
        .retried = false,
        .breaker = Counted::failure,
        .message_has = "max_body_bytes"},
       [](Config& c) { c.max_body_bytes = 1000; }},
      {"ChunkedBodyOverTheCap",
       send("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfa0\r\n" +
            std::string(4000, 'b') + "\r\n0\r\n\r\n"),
       {.status = {},
        .kind = ErrorKind::body_too_large,
        .fault = Fault::server,
        .retried = false,
        .breaker = Counted::failure},
       [](Config& c) { c.max_body_bytes = 1000; }},

      // --- Resets (SO_LINGER 0). ---
      {"ResetBeforeAnswering", always({Action::reset()}), transport_error()},
      {"ResetInTheHeaders", always({Action::send("HTTP/1.1 200 OK\r\nX-A: "), Action::reset()}),
       transport_error()},
      {"ResetMidBody",
       always(
           {Action::send("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhalf"), Action::reset()}),
       transport_error()},

      // --- Slow servers: slower than any timeout, so always past the attempt's 150 ms.
      {"TrickledHead",
       always({Action::trickle(http_response(200, "OK", std::string(200, 'x')), 25ms)}),
       timeout_error(), short_attempts},
      {"TrickledBody",
       always({Action::send("HTTP/1.1 200 OK\r\nContent-Length: 200\r\n\r\n"),
               Action::trickle(std::string(200, 'x'), 25ms)}),
       timeout_error(), short_attempts},
      {"NeverAnswers", always({Action::hold()}), timeout_error(), short_attempts},

      // --- Retry-After, on a 503; the request's deadline is 10 s. ---
      {"RetryAfterSecondsBeyondTheDeadline",
       then_ok({Action::send(status_503_retry_after({"30"}))}),
       retry_after_honoured(),
       {},
       [] { return Request{.url = server().url("/case"), .timeout = 10s}; },
       [](const Result& r, const std::vector<RawRequest>&) {
         ASSERT_FALSE(r);
         EXPECT_EQ(r.error().reason, Reason::deadline_exceeded);
         EXPECT_EQ(r.error().retry_after_hint(), std::optional<Nanos>(30s));
       }},
      {"RetryAfterDateBeyondTheDeadline", date_ahead, retry_after_honoured(),
       [](Config& c) { c.max_retry_after = std::chrono::days(365); },
       [] { return Request{.url = server().url("/case"), .timeout = 10s}; },
       [](const Result& r, const std::vector<RawRequest>&) {
         ASSERT_FALSE(r);
         EXPECT_EQ(r.error().reason, Reason::deadline_exceeded);
         ASSERT_TRUE(r.error().retry_after_hint());
         EXPECT_GT(*r.error().retry_after_hint(), 10s) << "longer than the request";
         EXPECT_LE(*r.error().retry_after_hint(), std::chrono::days(300));
       }},
      {"RetryAfterZero", then_ok({Action::send(status_503_retry_after({"0"}))}), ok_after_retry()},
      {"RetryAfterPastDate", then_ok({Action::send(status_503_retry_after({past}))}),
       ok_after_retry()},
      {"RetryAfterNegative", then_ok({Action::send(status_503_retry_after({"-5"}))}),
       ok_after_retry(1)},
      {"RetryAfterHuge", then_ok({Action::send(status_503_retry_after({"99999999999999999999"}))}),
       ok_after_retry(1)},
      {"RetryAfterAboveTheCap", then_ok({Action::send(status_503_retry_after({"3600"}))}),
       ok_after_retry(1)},
      {"RetryAfterGarbage", then_ok({Action::send(status_503_retry_after({"soon"}))}),
       ok_after_retry(1)},
      {"RetryAfterFraction", then_ok({Action::send(status_503_retry_after({"1.5"}))}),
       ok_after_retry(1)},
      {"RetryAfterObsoleteDate",
       then_ok({Action::send(status_503_retry_after({"Sunday, 06-Nov-94 08:49:37 GMT"}))}),
       ok_after_retry(1)},
      {"RetryAfterTwice", then_ok({Action::send(status_503_retry_after({"30", "30"}))}),
       ok_after_retry(1)},

      // --- Redirects (followed: max_redirects = 3). ---
      {"RedirectWithoutLocation",
       send(with_body("HTTP/1.1 302 Found\r\n")),
       {.status = {},
        .kind = ErrorKind::redirect,
        .fault = Fault::server,
        .retried = false,
        .breaker = Counted::failure,
        .message_has = "without a Location"},
       follow_redirects},
      {"RedirectWithEmptyLocation",
       send(with_body("HTTP/1.1 302 Found\r\nLocation: \r\n")),
       {.status = {},
        .kind = ErrorKind::redirect,
        .fault = Fault::server,
        .retried = false,
        .breaker = Counted::failure},
       follow_redirects},
      {"RedirectToAnotherScheme",
       send(with_body("HTTP/1.1 302 Found\r\nLocation: ftp://x/\r\n")),
       {.status = {},
        .kind = ErrorKind::redirect,
        .fault = Fault::server,
        .retried = false,
        .breaker = Counted::failure,
        .message_has = "unusable Location"},
       follow_redirects},
      {"RedirectRelative",
       [](int n, const RawRequest&) {
         return Script{Action::send(n == 1 ? with_body("HTTP/1.1 302 Found\r\nLocation: final\r\n")
                                           : http_response(200, "OK", "here"))};
       },
       {.status = 200, .hops = 1},
       follow_redirects,
       {},
       [](const Result& r, const std::vector<RawRequest>& seen) {
         ASSERT_TRUE(r);
         EXPECT_EQ(r->body, "here");
         ASSERT_EQ(seen.size(), 2u);
         EXPECT_EQ(seen[1].target, "/final") << "resolved against /case";
       }},
      {"RedirectLoop",
       send(with_body("HTTP/1.1 302 Found\r\nLocation: /case\r\n")),
       {.status = {},
        .kind = ErrorKind::redirect,
        .fault = Fault::caller,
        .breaker = Counted::success,
        .message_has = "max_redirects",
        .hops = 3},
       follow_redirects,
       {},
       [](const Result& r, const std::vector<RawRequest>& seen) {
         ASSERT_FALSE(r);
         EXPECT_EQ(seen.size(), 4u) << "the request and 3 redirects";
         EXPECT_EQ(r.error().attempts, 4u);
       }},
      {"RedirectNotFollowedByDefault",
       send(with_body("HTTP/1.1 302 Found\r\nLocation: /elsewhere\r\n")),
       {.status = {},
        .kind = ErrorKind::redirect,
        .fault = Fault::caller,
        .breaker = Counted::ignored,
        .message_has = "/elsewhere"}},
      {"MultipleChoicesIsNotFollowed",
       send(with_body("HTTP/1.1 300 Multiple Choices\r\nLocation: /a\r\n")),
       {.status = {},
        .kind = ErrorKind::redirect,
        .fault = Fault::caller,
        .breaker = Counted::ignored},
       follow_redirects},
      {"NotModifiedIsAResponse", send("HTTP/1.1 304 Not Modified\r\nConnection: close\r\n\r\n"),
       ok(304), follow_redirects},
      {"SeeOtherTurnsPostIntoGet",
       [](int n, const RawRequest&) {
         return Script{Action::send(n == 1 ? with_body("HTTP/1.1 303 See Other\r\nLocation: /r\r\n")
                                           : http_response(200, "OK", "got"))};
       },
       {.status = 200, .hops = 1},
       follow_redirects,
       [] {
         return Request{.method = "POST",
                        .url = server().url("/case"),
                        .headers = {{"Content-Type", "application/json"}, {"X-Trace", "t1"}},
                        .body = "{\"a\":1}",
                        .idempotency_key = "op-1"};
       },
       [](const Result& r, const std::vector<RawRequest>& seen) {
         ASSERT_TRUE(r);
         ASSERT_EQ(seen.size(), 2u);
         EXPECT_EQ(seen[0].method, "POST");
         EXPECT_EQ(seen[0].header("Idempotency-Key"), "op-1");
         EXPECT_EQ(seen[1].method, "GET");
         EXPECT_EQ(seen[1].body, "");
         EXPECT_FALSE(seen[1].header("Content-Type")) << "the body's headers go with it";
         EXPECT_FALSE(seen[1].header("Idempotency-Key")) << "a GET needs no key";
         EXPECT_EQ(seen[1].header("X-Trace"), "t1");
       }},
      {"FoundTurnsPostIntoGet",
       [](int n, const RawRequest&) {
         return Script{Action::send(n == 1 ? with_body("HTTP/1.1 302 Found\r\nLocation: /r\r\n")
                                           : http_response(200, "OK", "got"))};
       },
       {.status = 200, .hops = 1},
       follow_redirects,
       [] { return Request{.method = "POST", .url = server().url("/case"), .body = "x"}; },
       [](const Result&, const std::vector<RawRequest>& seen) {
         ASSERT_EQ(seen.size(), 2u);
         EXPECT_EQ(seen[1].method, "GET");
         EXPECT_EQ(seen[1].body, "");
       }},
      {"FoundKeepsPut",
       [](int n, const RawRequest&) {
         return Script{Action::send(n == 1 ? with_body("HTTP/1.1 302 Found\r\nLocation: /r\r\n")
                                           : http_response(200, "OK", "got"))};
       },
       {.status = 200, .hops = 1},
       follow_redirects,
       [] { return Request{.method = "PUT", .url = server().url("/case"), .body = "x"}; },
       [](const Result&, const std::vector<RawRequest>& seen) {
         ASSERT_EQ(seen.size(), 2u);
         EXPECT_EQ(seen[1].method, "PUT");
         EXPECT_EQ(seen[1].body, "x");
       }},
      {"TemporaryRedirectKeepsPostAndKeyOnTheSameOrigin",
       [](int n, const RawRequest&) {
         return Script{
             Action::send(n == 1 ? with_body("HTTP/1.1 307 Temporary Redirect\r\nLocation: /r\r\n")
                                 : http_response(200, "OK", "got"))};
       },
       {.status = 200, .hops = 1},
       follow_redirects,
       [] {
         return Request{.method = "POST",
                        .url = server().url("/case"),
                        .headers = {{"Authorization", "Bearer s3cret"}},
                        .body = "payload",
                        .idempotency_key = "op-2"};
       },
       [](const Result&, const std::vector<RawRequest>& seen) {
         ASSERT_EQ(seen.size(), 2u);
         EXPECT_EQ(seen[1].method, "POST");
         EXPECT_EQ(seen[1].body, "payload");
         EXPECT_EQ(seen[1].header("Idempotency-Key"), "op-2");
         EXPECT_EQ(seen[1].header("Authorization"), "Bearer s3cret") << "same origin";
       }},
      {"CrossOriginRedirectDropsCredentialsAndKeys",
       [](int n, const RawRequest&) {
         return Script{
             Action::send(n == 1 ? with_body("HTTP/1.1 307 Temporary Redirect\r\nLocation: " +
                                             server().url("/there", 1) + "\r\n")
                                 : http_response(503, "Service Unavailable", "down"))};
       },
       {.status = {},
        .kind = ErrorKind::status,
        .fault = Fault::server,
        .retried = false,
        .breaker = Counted::success,
        .hops = 1},
       [](Config& c) {
         c.max_redirects = 3;
         c.origin_headers = {"X-Api-Key"};
       },
       [] {
         return Request{.method = "POST",
                        .url = server().url("/case"),
                        .headers = {{"Authorization", "Bearer s3cret"},
                                    {"Cookie", "session=1"},
                                    {"X-Api-Key", "k"},
                                    {"X-Trace", "t2"}},
                        .body = "payload",
                        .idempotency_key = "op-3"};
       },
       [](const Result& r, const std::vector<RawRequest>& seen) {
         ASSERT_FALSE(r);
         EXPECT_EQ(r.error().status, 503);
         ASSERT_EQ(seen.size(), 2u) << "a POST without its key is not retried at the new origin";
         EXPECT_EQ(seen[1].port, server().port(1));
         EXPECT_EQ(seen[1].method, "POST");
         EXPECT_EQ(seen[1].body, "payload");
         EXPECT_FALSE(seen[1].header("Authorization"));
         EXPECT_FALSE(seen[1].header("Cookie"));
         EXPECT_FALSE(seen[1].header("X-Api-Key"));
         EXPECT_FALSE(seen[1].header("Idempotency-Key"));
         EXPECT_EQ(seen[1].header("X-Trace"), "t2");
       }},
  };
  (void)s;
  return v;
}

const std::vector<Case>& all_cases() {
  static const std::vector<Case> all = cases();
  return all;
}

// One run of a case, by either client.
struct Ran {
  Result result;
  ClientStats stats;
  BreakerSnapshot breaker;  // the first host's
};

Ran run_sync(const Config& c, const Request& req) {
  Client client(c);
  Result r = client.request(req);
  return {std::move(r), client.stats(), client.breaker_for(req.url)->snapshot()};
}

Ran run_async(const Config& c, const Request& req) {
  ::asio::io_context io;
  AsyncClient client(io.get_executor(), c);
  std::optional<Result> out;
  ::asio::co_spawn(
      io,
      [&]() -> ::asio::awaitable<void> {
        auto op = client.async_request(req);
        out.emplace(co_await std::move(op));
      },
      ::asio::detached);
  io.run();
  return {std::move(*out), client.stats(), client.breaker_for(req.url)->snapshot()};
}

struct Param {
  std::size_t index;
  bool async;
};

void PrintTo(const Param& p, std::ostream* os) {
  *os << all_cases()[p.index].name << (p.async ? " (AsyncClient)" : " (Client)");
}

class HostileServerTest : public ::testing::TestWithParam<Param> {};

TEST_P(HostileServerTest, Classifies) {
  const Case& k = all_cases()[GetParam().index];
  Config config = base_config();
  if (k.config) k.config(config);
  const Request req = k.request ? k.request() : Request{.url = server().url("/case")};
  server().script(k.script);

  const Ran run = GetParam().async ? run_async(config, req) : run_sync(config, req);
  ASSERT_TRUE(server().sync());  // the client is gone: every request it sent is recorded
  const Result& r = run.result;
  const std::vector<RawRequest> seen = server().requests();
  const Expect& e = k.expect;

  if (e.status) {
    ASSERT_TRUE(r) << to_string(r.error().kind) << ": " << r.error().message;
    EXPECT_EQ(r->status, *e.status);
  } else {
    ASSERT_FALSE(r) << "a response with status " << r->status;
    EXPECT_EQ(r.error().kind, e.kind)
        << to_string(r.error().kind) << " (" << r.error().message << ")";
    EXPECT_NE(r.error().message.find(e.message_has), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().attempts, run.stats.attempts);
  }
  EXPECT_EQ(fault_of(r), e.fault) << name(fault_of(r)) << " vs " << name(e.fault);
  // Retried or not: the attempts the client made, beside the redirects' hops.
  EXPECT_EQ(run.stats.attempts, static_cast<std::uint64_t>(e.hops + 1 + (e.retried ? 1 : 0)))
      << (e.retried ? "retried once" : "not retried");
  // Each reached the server — except, after a timeout, one the client gave up on before
  // sending it (a client thread stalled past the attempt's timeout).
  if (e.status || e.kind != ErrorKind::timeout) {
    EXPECT_EQ(seen.size(), run.stats.attempts) << "every attempt reached the server";
  } else {
    EXPECT_LE(seen.size(), run.stats.attempts);
  }
  EXPECT_EQ(run.stats.hostile_retry_after, e.hostile_retry_after);

  const BreakerSnapshot& b = run.breaker;
  const std::uint64_t calls = b.failures + b.successes + b.ignored;
  const std::uint64_t in_kind = e.breaker == Counted::failure   ? b.failures
                                : e.breaker == Counted::success ? b.successes
                                                                : b.ignored;
  EXPECT_GE(calls, 1u);
  EXPECT_EQ(in_kind, calls) << "the breaker counted " << b.successes << " successes, " << b.failures
                            << " failures, " << b.ignored << " ignored; expected "
                            << name(e.breaker);
  EXPECT_EQ(run.stats.in_flight, 0u);
  EXPECT_EQ(run.stats.transfers_in_flight, 0u);
  if (k.check) k.check(r, seen);
}

std::vector<Param> params() {
  std::vector<Param> p;
  const std::size_t n = all_cases().size();
  for (std::size_t i = 0; i < n; ++i) {
    p.push_back({i, false});
    p.push_back({i, true});
  }
  return p;
}

INSTANTIATE_TEST_SUITE_P(Cases, HostileServerTest, ::testing::ValuesIn(params()),
                         [](const ::testing::TestParamInfo<Param>& p) {
                           return all_cases()[p.param.index].name +
                                  (p.param.async ? "_Async" : "_Sync");
                         });

// A dependency that answers garbage is failing: its breaker opens, as for 5xx.
TEST(HostileServer, AGarbledStatusLineTripsTheBreaker) {
  ASSERT_TRUE(server().sync());
  server().script(send("HTTP/9.9 200 OK\r\nContent-Length: 2\r\n\r\nok"));
  Config c = base_config();
  c.breaker = {.name = "hostile", .consecutive_failures = 3, .open_duration = 1h};
  c.retry.max_attempts = 1;
  Client client(c);
  for (int i = 0; i < 3; ++i) {
    auto r = client.get(server().url("/garbled"));
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().kind, ErrorKind::protocol) << r.error().message;
    EXPECT_EQ(r.error().outcome(), Outcome::failure);
  }
  EXPECT_EQ(client.breaker_for(server().url())->state(), State::open);
  auto r = client.get(server().url("/garbled"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::rejected_by_breaker);
  EXPECT_EQ(server().request_count(), 3) << "the open breaker kept the 4th away";
}

// The same header bytes in one line or in many: the same clear error, not retried.
TEST(HostileServer, OneHugeHeaderLineIsRefusedLikeManyHeaders) {
  ASSERT_TRUE(server().sync());
  // 1 MB either way: past max_header_bytes (64 KiB) and libcurl's line limit (100 KB).
  // (The 10 MB line is a case of the table above.)
  const std::string value(990, 'h');
  std::string one = "X-Big: ", many;
  many.reserve(1u << 20);
  for (int i = 0; i < 1000; ++i) {
    one += value;
    many.append("X-H").append(std::to_string(i)).append(": ").append(value).append("\r\n");
  }
  one += "\r\n";
  std::vector<Error> errors;
  for (const std::string* head : {&one, &many}) {
    server().script(send(with_body("HTTP/1.1 200 OK\r\n" + *head)));
    Client client(base_config());
    auto r = client.get(server().url("/headers"));
    ASSERT_FALSE(r);
    errors.push_back(r.error());
    EXPECT_EQ(server().request_count(), 1) << "not retried";
  }
  for (const Error& e : errors) {
    EXPECT_EQ(e.kind, ErrorKind::headers_too_large) << e.message;
    EXPECT_EQ(e.outcome(), Outcome::failure);
    EXPECT_EQ(e.attempts, 1u);
    EXPECT_NE(e.message.find("max_header_bytes (65536)"), std::string::npos) << e.message;
  }
}

// A redirect to another origin goes through that origin's breaker: an open one
// refuses the hop, and the first origin is not blamed for it.
TEST(HostileServer, ACrossOriginRedirectIsJudgedByTheNewOriginsBreaker) {
  ASSERT_TRUE(server().sync());
  Config c = base_config();
  c.max_redirects = 3;
  c.retry.max_attempts = 1;
  c.breaker = {.name = "hostile", .consecutive_failures = 1, .open_duration = 1h};
  Client client(c);
  // Origin 1 fails once: its breaker opens.
  server().script(send(http_response(500, "Internal Server Error", "down")));
  ASSERT_FALSE(client.get(server().url("/b", 1)));
  ASSERT_EQ(client.breaker_for(server().url("/", 1))->state(), State::open);
  // Origin 0 redirects there.
  server().script(
      send(with_body("HTTP/1.1 302 Found\r\nLocation: " + server().url("/b", 1) + "\r\n")));
  auto r = client.get(server().url("/a"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::rejected_by_breaker) << r.error().message;
  EXPECT_EQ(server().request_count(), 1) << "only origin 0 was asked";
  const BreakerSnapshot first = client.breaker_for(server().url("/"))->snapshot();
  EXPECT_EQ(first.successes, 1u) << "the redirect was origin 0's answer, a good one";
  EXPECT_EQ(first.failures, 0u);
}

// --- Random replies: a campaign with a seed. ---
//
// A well-formed reply (a status, a few headers among them Retry-After and Location, a
// body framed by Content-Length or chunks), mangled by up to three random edits (a
// byte changed, a CR, LF, NUL, space or colon inserted, a line doubled, a range cut,
// the reply cut short), then closed, reset or held. Whatever comes, the request must
// end with a response or an error whose kind a reply can cause, every attempt must
// reach the server, the breaker must count each call once, and nothing may stay in
// flight. CI runs a fixed seed; BULWARK_HOSTILE_SEED and BULWARK_HOSTILE_ITERATIONS
// run a campaign (docs/testing.md).

std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

std::string random_reply(std::mt19937_64& gen) {
  auto pick = [&](std::uint64_t n) { return static_cast<std::size_t>(gen() % n); };
  static const std::vector<std::string> statuses = {
      "200 OK",        "204 No Content", "301 Moved",    "302 Found", "303 See Other",
      "307 Temporary", "404 Not Found",  "429 Too Many", "500 Error", "503 Unavailable"};
  static const std::vector<std::string> retry_after = {
      "0", "1", "-1", "soon", "3600", "Sun, 06 Nov 1994 08:49:37 GMT"};
  static const std::vector<std::string> locations = {"/next",    "next",        "",
                                                     "ftp://x/", "http://[bad", "/case"};
  std::string head = "HTTP/1.1 " + statuses[pick(statuses.size())] + "\r\n";
  if (pick(2) == 0) head += "Retry-After: " + retry_after[pick(retry_after.size())] + "\r\n";
  if (pick(2) == 0) head += "Location: " + locations[pick(locations.size())] + "\r\n";
  for (std::size_t i = pick(4); i > 0; --i) head += "X-F" + std::to_string(i) + ": v\r\n";
  const std::string body(pick(300), 'b');
  std::string reply;
  if (pick(3) == 0) {
    char size[32];
    std::snprintf(size, sizeof size, "%zx", body.size());
    reply = head + "Transfer-Encoding: chunked\r\n\r\n" + size + "\r\n" + body + "\r\n0\r\n\r\n";
  } else {
    reply = head + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  }
  static const std::string inserts(std::string("\0\r\n :\xff", 6));
  for (std::size_t edits = pick(4); edits > 0 && !reply.empty(); --edits) {
    const std::size_t at = pick(reply.size());
    switch (pick(5)) {
      case 0:
        reply[at] = static_cast<char>(gen());
        break;
      case 1:
        reply.insert(at, 1, inserts[pick(inserts.size())]);
        break;
      case 2: {  // double the line holding `at`
        const std::size_t from =
            reply.rfind('\n', at) == std::string::npos ? 0 : reply.rfind('\n', at) + 1;
        const std::size_t to = reply.find('\n', at);
        if (to != std::string::npos) reply.insert(from, reply.substr(from, to - from + 1));
        break;
      }
      case 3:
        reply.erase(at, pick(8) + 1);
        break;
      default:
        reply.resize(at);
        break;
    }
  }
  return reply;
}

std::string printable(const std::string& bytes) {
  std::string out;
  for (const char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\r') {
      out += "\\r";
    } else if (c == '\n') {
      out += "\\n";
    } else if (u < 0x20 || u >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

TEST(HostileServer, RandomRepliesEndClassifiedAndCountedOnce) {
  ASSERT_TRUE(server().sync());
  const std::uint64_t seed = env_or("BULWARK_HOSTILE_SEED", 20240522);
  const std::uint64_t iterations = env_or("BULWARK_HOSTILE_ITERATIONS", 60);
  std::printf("random replies: BULWARK_HOSTILE_SEED=%llu BULWARK_HOSTILE_ITERATIONS=%llu\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(iterations));
  for (std::uint64_t i = 0; i < iterations; ++i) {
    std::mt19937_64 gen(seed * 1000003u + i);
    const std::string reply = random_reply(gen);
    const auto ending = gen() % 20;  // mostly closed, sometimes reset or held
    Script script{Action::send(reply)};
    if (ending == 0) script.push_back(Action::reset());
    if (ending == 1) script.push_back(Action::hold());
    server().always(script);
    Config c = base_config();
    c.attempt_timeout = 200ms;  // a held reply ends in a timeout, an allowed outcome
    c.max_redirects = gen() % 2 == 0 ? 0 : 2;
    c.max_body_bytes = 200;
    const bool async = gen() % 2 == 0;
    const Request req{.url = server().url("/case")};
    SCOPED_TRACE("case " + std::to_string(i) + (async ? " (AsyncClient)" : " (Client)") +
                 ", max_redirects " + std::to_string(c.max_redirects) + ", ending " +
                 std::to_string(ending) + ": \"" + printable(reply) + "\"");
    const Ran run = async ? run_async(c, req) : run_sync(c, req);
    ASSERT_TRUE(server().sync());
    const Result& r = run.result;
    const std::size_t seen = server().requests().size();
    // At most one request per attempt; fewer only if an attempt timed out before it
    // sent its request (a thread stalled for the attempt's 200 ms).
    EXPECT_LE(seen, run.stats.attempts);
    EXPECT_GE(run.stats.attempts, 1u);
    if (r) {
      EXPECT_GE(r->status, 100);
      EXPECT_LE(r->status, 999);
      EXPECT_LE(r->body.size(), c.max_body_bytes);
      EXPECT_FALSE(r->status >= 300 && r->status < 400 && r->status != 304)
          << "a redirect is followed or an error, never a response";
    } else {
      const Error& e = r.error();
      const ErrorKind k = e.kind;
      EXPECT_TRUE(k == ErrorKind::transport || k == ErrorKind::timeout || k == ErrorKind::status ||
                  k == ErrorKind::protocol || k == ErrorKind::body_too_large ||
                  k == ErrorKind::headers_too_large || k == ErrorKind::redirect)
          << "a reply cannot cause " << to_string(k) << ": " << e.message;
      EXPECT_EQ(e.attempts, run.stats.attempts);
      if (k == ErrorKind::status) {
        EXPECT_EQ(e.outcome() == Outcome::ignored, e.status < 500 && e.status != 429);
      }
      if (k != ErrorKind::status && k != ErrorKind::redirect) {
        EXPECT_EQ(e.outcome(), Outcome::failure) << to_string(k);
      }
      if (e.outcome() == Outcome::ignored && c.max_redirects == 0) {
        EXPECT_EQ(run.stats.attempts, 1u) << "not retried";  // (a redirect's hops may retry)
      }
      EXPECT_FALSE(e.message.empty());
    }
    EXPECT_LE(run.stats.attempts, 2u * (1 + c.max_redirects));
    const std::uint64_t calls = run.breaker.failures + run.breaker.successes + run.breaker.ignored;
    EXPECT_GE(calls, 1u) << "the first origin's breaker heard of the call";
    EXPECT_LE(calls, 1u + c.max_redirects) << "once per hop at most";
    EXPECT_LE(run.stats.hostile_retry_after, run.stats.attempts);
    EXPECT_EQ(run.stats.in_flight, 0u);
    EXPECT_EQ(run.stats.transfers_in_flight, 0u);
    if (HasFailure()) {
      std::printf(
          "reproduce: BULWARK_HOSTILE_SEED=%llu BULWARK_HOSTILE_ITERATIONS=%llu "
          "(case %llu)\n",
          static_cast<unsigned long long>(seed), static_cast<unsigned long long>(i + 1),
          static_cast<unsigned long long>(i));
      return;
    }
  }
}

}  // namespace
}  // namespace bulwark::http
