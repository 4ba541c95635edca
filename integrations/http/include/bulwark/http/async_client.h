// bulwark/http/async_client.h — the HTTP client as a C++20 coroutine over Asio.
//
// The same requests, errors, classification, Retry-After, idempotency and limits as
// Client (client.h), sent over libcurl's multi interface driven by an Asio executor:
// curl's sockets are watched with asio::posix::stream_descriptor and its timeouts with
// a steady_timer, so a request suspends the awaiting coroutine instead of blocking a
// thread. Requests go through bulwark::asio's pipeline: the host's breaker (one per
// host or route, as Client), the client's AsyncBulkhead (Config::bulkhead's
// max_concurrent and max_wait; waiters queue, suspended), and the host's retry, whose
// backoff waits on a timer. Redirects are followed as Client follows them, each hop
// through its origin's breaker and retry and the client's bulkhead.
//
//   asio::io_context io;
//   bulwark::http::AsyncClient reviews(io.get_executor(), config);
//   asio::co_spawn(io, [&]() -> asio::awaitable<void> {
//     auto r = co_await reviews.async_get("http://reviews:8080/reviews/42");
//     ...
//   }, asio::detached);
//   io.run();
//
// Cancellation: the awaiting coroutine's cancellation slot (a parent operation
// cancelled, asio's || operator) aborts the transfer at once (curl_multi_remove_handle)
// and the request ends with ErrorKind::cancelled; the request's deadline does the same
// through the pipeline and through CURLOPT_TIMEOUT_MS.
//
// Threading: the client, and every coroutine awaiting it, runs on the one executor it
// was given (a single-threaded io_context, or a strand). Connection reuse: finished
// handles go back to a pool (Config::max_idle_handles) and the multi handle keeps the
// connections alive. No thread is created.
//
// Cost, beside Client's (client.h): each request runs as a coroutine of its own
// (asio::co_spawn, one allocation more), so that the client can cancel it.
//
// Lifetime. The client may be destroyed with requests pending — waiting in the
// bulkhead's queue, in a backoff or Retry-After wait, in a transfer. The destructor
// cancels each where it waits; each then completes, when its executor next runs it,
// with ErrorKind::shutdown (the caller's side: ignored by the breaker, never retried),
// and never touches the destroyed object: a request holds the client's state (its
// breakers, bulkhead, curl handles) until it completes. An awaitable made before the
// destruction and awaited after it completes at once with ErrorKind::shutdown.
//   - Destroy the client on its executor's thread — from a coroutine or handler
//     running there, or while no thread runs the io_context — as Asio requires for
//     emitting cancellation; never from another thread while the io_context runs.
//   - Destroy it before its io_context, as any Asio I/O object. The io_context may
//     then be destroyed without running again: the pending requests' coroutines are
//     destroyed unresumed, and with the last of them the client's state (nothing
//     leaks, nothing is resumed).

#ifndef BULWARK_HTTP_ASYNC_CLIENT_H_
#define BULWARK_HTTP_ASYNC_CLIENT_H_

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <iosfwd>
#include <memory>
#include <string>
#include <utility>

#include "bulwark/clock.h"
#include "bulwark/context.h"
#include "bulwark/expected.h"
#include "bulwark/http/client.h"

namespace bulwark::http {

class AsyncClient {
 public:
  // Validates `config` (throws InvalidConfig naming the field).
  AsyncClient(::asio::any_io_executor executor, Config config);
  // Cancels the pending requests (see Lifetime): on the executor's thread.
  ~AsyncClient();
  AsyncClient(const AsyncClient&) = delete;
  AsyncClient& operator=(const AsyncClient&) = delete;

  // Sends `request` through the pipeline; completes on the client's executor. The
  // awaitable owns its copies of `request` and `ctx`.
  //
  // GCC 12 destroys an aggregate temporary twice when the full-expression that creates
  // it contains a co_await — in any coroutine, whatever the function it is passed to —
  // so with GCC 12 `co_await client.async_request(Request{...})` is a double free (so
  // is a lambda that captures by value, or any temporary with a destructor, passed in
  // such an expression). Create the request, or the awaitable, in a statement of its own:
  //   auto op = client.async_request({.url = url});   // no co_await here: safe
  //   auto r = co_await std::move(op);
  // or use async_get, whose arguments are not aggregates.
  ::asio::awaitable<Expected<Response, Error>> async_request(Request request,
                                                             Context ctx = Context());

  // A GET of `url` (timeout: as Request::timeout). Safe to co_await in one expression
  // with any compiler: `auto r = co_await client.async_get(url);`.
  ::asio::awaitable<Expected<Response, Error>> async_get(std::string url,
                                                         Nanos timeout = Nanos::zero(),
                                                         Context ctx = Context()) {
    return async_request(Request{.url = std::move(url), .timeout = timeout}, std::move(ctx));
  }

  // As Client::stats(). Relaxed atomics: any thread.
  ClientStats stats() const noexcept;

  // Client::write_metrics's exposition (client.h), but for the bulkhead: the async
  // client has one AsyncBulkhead for all hosts, so the per-host series carry the
  // breaker, retry and retry budget, and the bulkhead is the client's:
  // <prefix>_http_client_bulkhead_{concurrent_calls,max_allowed_concurrent_calls,
  // queued_calls,rejected_calls_total} (label client=Config::name). Cost: a scrape of
  // the host registry; allocates. Thread-safe: any thread, while requests run on the
  // executor (it reads atomics and the registry, never the executor's state).
  void write_metrics(std::ostream& out) const;
  void write_metrics(std::ostream& out, const prometheus::ExpositionOptions& options) const;

  // The breaker of `url`'s host (or route: Config::key_by), created if needed, of the
  // kind the config chose (Config::any_breaker), for inspection (state(), snapshot())
  // and tests. Null for a URL that does not parse.
  // Valid while the client lives. Cost: a registry lookup (allocates only to create
  // the key). Thread-safe: any thread; the breaker's readers are too.
  BreakerRef breaker_for(const std::string& url, const std::string& route = {});

  // As Client::on_transition and Client::subscribe (client.h): every breaker's
  // transitions (or the events of `kinds`), with the origin as Event::key. A listener
  // runs on the executor's thread, inside the request whose outcome caused the
  // transition; it must not block (it would stall every request of the executor).
  // The client-wide bulkhead's rejections come as `rejection` events too
  // (BulkheadRejectionInfo, the request's key, the bulkhead's name); write_metrics
  // counts them. Subscribing is thread-safe (any thread); the Subscription must not
  // outlive the client.
  Subscription on_transition(EventListener listener);
  Subscription subscribe(EventMask kinds, EventListener listener);

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace bulwark::http

#endif  // BULWARK_HTTP_ASYNC_CLIENT_H_
