// A small service over an installed bulwark: one GET of the upstream with the sync
// client, one with the async client, a registry guarding an operation of its own, and
// /metrics with all three. Built outside the tree (CMakeLists.txt).
//
//   consumer <upstream-url> [seconds]
// prints "sync: <status> <body>", "async: <status> <body>" (or "...: error <kind>"),
// then "metrics: http://127.0.0.1:<port>/metrics", and serves /metrics until GET /quit
// or `seconds` (default 30) have passed.

#include <httplib.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include "bulwark/http/async_client.h"
#include "bulwark/http/client.h"
#include "bulwark/prometheus.h"
#include "bulwark/registry.h"

namespace http = bulwark::http;
using namespace std::chrono_literals;

namespace {

std::string describe(const bulwark::Expected<http::Response, http::Error>& r) {
  if (!r) return "error " + std::string(http::to_string(r.error().kind));
  return std::to_string(r->status) + " " + r->body;
}

http::Config upstream_config(std::string name) {
  http::Config c;
  c.name = std::move(name);
  // Any breaker kind fits (what `bulwark calibrate` proposes): here a time window.
  c.any_breaker = bulwark::TimeWindowConfig{.name = "upstream",
                                            .window = {.length = 60s, .buckets = 10},
                                            .minimum_calls = 20,
                                            .failure_rate = 0.5,
                                            .open_duration = 10s};
  c.retry = bulwark::RetryConfig{.name = "upstream", .max_attempts = 2};
  c.default_timeout = 5s;
  c.detailed_metrics = true;
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: consumer <upstream-url> [seconds]\n";
    return 2;
  }
  const std::string url = argv[1];
  const int seconds = argc > 2 ? std::atoi(argv[2]) : 30;

  http::Client sync_client(upstream_config("upstream_sync"));
  std::cout << "sync: " << describe(sync_client.get(url)) << std::endl;

  asio::io_context io;
  http::AsyncClient async_client(io.get_executor(), upstream_config("upstream_async"));
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto r = co_await async_client.async_get(url);
        std::cout << "async: " << describe(r) << std::endl;
      },
      asio::detached);
  io.run();

  // The service's own operations, each behind a breaker of its registry.
  bulwark::Registry<std::string> operations(
      {.name = "operations", .breaker = {.name = "operation", .consecutive_failures = 5}});
  if (auto call = operations.try_acquire("render")) call->record(bulwark::Outcome::success);

  httplib::Server server;
  server.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
    std::ostringstream out;
    // One prefix per source, so that no metric family is written twice.
    sync_client.write_metrics(out);
    async_client.write_metrics(out, {.prefix = "bulwark_async"});
    bulwark::prometheus::write(out, operations, {.prefix = "bulwark_service"});
    res.set_content(out.str(), "text/plain; version=0.0.4");
  });
  server.Get("/quit", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content("bye\n", "text/plain");
    server.stop();  // ends listen_after_bind() once this answer is sent
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  if (port <= 0) {
    std::cerr << "consumer: could not bind a loopback port\n";
    return 1;
  }
  std::cout << "metrics: http://127.0.0.1:" << port << "/metrics" << std::endl;

  // Bounded: stop after `seconds` if nobody asked.
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread guard([&] {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, std::chrono::seconds(seconds), [&] { return done; })) server.stop();
  });
  server.listen_after_bind();
  {
    std::lock_guard lock(mu);
    done = true;
  }
  cv.notify_all();
  guard.join();
  return 0;
}
