// Destroying a Client or an AsyncClient with requests pending, at every place a
// request can wait: the bulkhead's queue, a retry's backoff, a Retry-After wait, a
// transfer in flight (before the answer, and halfway through its body). Each pending
// request must end with ErrorKind::shutdown — never resume into freed memory — and,
// for the AsyncClient, an io_context destroyed afterwards without running again must
// destroy the suspended requests without a leak. Run under AddressSanitizer (with
// LeakSanitizer) to mean anything.
//
// The test drives each request to its waiting place and checks that it is there by
// the client's gauges (requests and transfers in flight, attempts made) and by what
// the server saw; for the AsyncClient, by running the io_context until no handler is
// ready, on the test's thread. Every wait is for a condition, bounded by 30 s.

#include <gtest/gtest.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "bulwark/http/async_client.h"
#include "bulwark/http/client.h"
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

HostileServer& server() {
  static HostileServer s;
  return s;
}

// Polls `cond` until it holds; false after 30 s.
bool eventually(const std::function<bool()>& cond) {
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

Config lifetime_config() {
  Config c;
  c.name = "lifetime";
  c.breaker = {.name = "lifetime", .consecutive_failures = 100, .open_duration = 1h};
  c.retry = RetryConfig{.name = "lifetime", .max_attempts = 3, .backoff = Backoff::constant(1ms)};
  // Nothing here may end by itself while the test looks: the client's destruction ends it.
  c.default_timeout = 1h;
  c.max_retry_after = 1h;
  return c;
}

// A place where a request waits, how to get one there, and how to tell it is there.
struct WaitingPlace {
  std::string name;
  Scripter script;
  std::function<void(Config&)> config;
  int requests;  // started, in order
  // The requests are where they wait (read between io_context runs, or while the
  // client's threads wait).
  std::function<bool(const ClientStats&, HostileServer&)> reached;
};

Scripter always(Script s) {
  return [s = std::move(s)](int, const RawRequest&) { return s; };
}

std::vector<WaitingPlace> places() {
  return {
      {"BulkheadQueue", always({Action::hold()}),
       [](Config& c) { c.bulkhead = {.name = "lifetime", .max_concurrent = 1, .max_wait = 1h}; }, 2,
       [](const ClientStats& s, HostileServer& srv) {
         // The first holds the only slot in its transfer; the second has started.
         return s.in_flight == 2 && s.transfers_in_flight == 1 && srv.request_count() == 1;
       }},
      {"Backoff", always({Action::send(http_response(503, "Service Unavailable", "busy"))}),
       [](Config& c) { c.retry.backoff = Backoff::constant(std::chrono::minutes(10)); }, 1,
       [](const ClientStats& s, HostileServer& srv) {
         // The server answered the one attempt, whose transfer has ended.
         return s.in_flight == 1 && s.attempts == 1 && s.transfers_in_flight == 0 &&
                srv.request_count() == 1;
       }},
      {"RetryAfter",
       always(
           {Action::send(http_response(503, "Service Unavailable", "busy", {"Retry-After: 600"}))}),
       {},
       1,
       [](const ClientStats& s, HostileServer& srv) {
         // The server answered the one attempt, whose transfer has ended.
         return s.in_flight == 1 && s.attempts == 1 && s.transfers_in_flight == 0 &&
                srv.request_count() == 1;
       }},
      {"TransferBeforeTheAnswer",
       always({Action::hold()}),
       {},
       1,
       [](const ClientStats& s, HostileServer& srv) {
         return s.transfers_in_flight == 1 && srv.request_count() == 1;
       }},
      {"TransferHalfwayThroughTheBody",
       always({Action::send("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhalf"), Action::hold()}),
       {},
       1,
       [](const ClientStats& s, HostileServer& srv) {
         return s.transfers_in_flight == 1 && srv.request_count() == 1;
       }},
  };
}

const std::vector<WaitingPlace>& all_places() {
  static const std::vector<WaitingPlace> all = places();
  return all;
}

void expect_shutdown(const std::optional<Result>& r, const std::string& what) {
  ASSERT_TRUE(r) << what << ": never completed";
  ASSERT_FALSE(*r) << what << ": succeeded";
  EXPECT_EQ(r->error().kind, ErrorKind::shutdown)
      << what << ": " << to_string(r->error().kind) << " (" << r->error().message << ")";
  EXPECT_EQ(r->error().reason, Reason::cancelled) << what;
  EXPECT_EQ(r->error().outcome(), Outcome::ignored) << what << ": not the server's fault";
}

// --- AsyncClient ---

enum class Then {
  run,              // the io_context runs on: every request completes
  destroy_context,  // the io_context is destroyed without running again
};

struct AsyncParam {
  std::size_t place;
  Then then;
};

void PrintTo(const AsyncParam& p, std::ostream* os) {
  *os << all_places()[p.place].name
      << (p.then == Then::run ? ", then the io_context runs" : ", then it is destroyed");
}

class AsyncClientLifetime : public ::testing::TestWithParam<AsyncParam> {
 protected:
  void SetUp() override { ASSERT_TRUE(server().sync()); }
};

TEST_P(AsyncClientLifetime, DestroyedWhileRequestsWait) {
  const WaitingPlace& place = all_places()[GetParam().place];
  server().script(place.script);
  Config config = lifetime_config();
  if (place.config) place.config(config);

  std::vector<std::optional<Result>> results(static_cast<std::size_t>(place.requests));
  auto io = std::make_unique<::asio::io_context>();
  auto client = std::make_unique<AsyncClient>(io->get_executor(), config);
  for (std::size_t i = 0; i < results.size(); ++i) {
    ::asio::co_spawn(
        *io,
        [c = client.get(), &out = results[i]]() -> ::asio::awaitable<void> {
          auto op = c->async_get(server().url("/wait"));
          out.emplace(co_await std::move(op));
        },
        ::asio::detached);
    // One at a time: the first is in its transfer (holding the bulkhead's slot)
    // before the next starts.
    const std::uint64_t transfers = i + 1 < results.size() ? 1 : 0;
    const auto until = std::chrono::steady_clock::now() + 30s;
    while (client->stats().in_flight != i + 1 || client->stats().transfers_in_flight < transfers) {
      ASSERT_LT(std::chrono::steady_clock::now(), until) << "request " << i << " never started";
      io->run_one_for(10ms);
    }
  }
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (!place.reached(client->stats(), server())) {
    ASSERT_LT(std::chrono::steady_clock::now(), until)
        << place.name << " never reached: in flight " << client->stats().in_flight << ", transfers "
        << client->stats().transfers_in_flight << ", attempts " << client->stats().attempts
        << ", server saw " << server().request_count();
    io->run_one_for(10ms);  // waits for the server's bytes
  }
  while (io->poll() > 0) {
  }  // nothing is ready: each request waits where it is
  for (const auto& r : results) ASSERT_FALSE(r) << "a request completed before the test";

  client.reset();  // on the io_context's thread, which is not running it now
  if (GetParam().then == Then::run) {
    io->restart();
    io->run();
    for (std::size_t i = 0; i < results.size(); ++i)
      expect_shutdown(results[i], place.name + " request " + std::to_string(i));
  } else {
    io.reset();  // the suspended requests are destroyed, never resumed
    for (const auto& r : results) EXPECT_FALSE(r);
  }
}

std::vector<AsyncParam> async_params() {
  std::vector<AsyncParam> v;
  for (std::size_t i = 0; i < all_places().size(); ++i) {
    v.push_back({i, Then::run});
    v.push_back({i, Then::destroy_context});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(WaitingPlaces, AsyncClientLifetime, ::testing::ValuesIn(async_params()),
                         [](const ::testing::TestParamInfo<AsyncParam>& p) {
                           return all_places()[p.param.place].name +
                                  (p.param.then == Then::run ? "_ThenRun"
                                                             : "_ThenDestroyTheContext");
                         });

TEST(AsyncClientLifetimeTest, ARequestAwaitedAfterTheClientIsGoneEndsAtOnce) {
  ::asio::io_context io;
  auto client = std::make_unique<AsyncClient>(io.get_executor(), lifetime_config());
  auto op = client->async_get(server().url("/never"));  // made, not yet awaited
  client.reset();
  std::optional<Result> r;
  ::asio::co_spawn(
      io, [&]() -> ::asio::awaitable<void> { r.emplace(co_await std::move(op)); },
      ::asio::detached);
  io.run();
  expect_shutdown(r, "awaited after");
}

TEST(AsyncClientLifetimeTest, DestroyedFromACoroutineOnItsExecutor) {
  ASSERT_TRUE(server().sync());
  server().script(always({Action::hold()}));
  ::asio::io_context io;
  auto client = std::make_unique<AsyncClient>(io.get_executor(), lifetime_config());
  std::optional<Result> r;
  ::asio::co_spawn(
      io,
      [&]() -> ::asio::awaitable<void> {
        r.emplace(co_await client->async_get(server().url("/x")));
      },
      ::asio::detached);
  // A watcher on the same io_context destroys the client once the server holds the request.
  std::function<void()> watch = [&] {
    if (server().request_count() == 1 && client->stats().transfers_in_flight == 1) {
      client.reset();
    } else {
      std::this_thread::sleep_for(1ms);
      ::asio::post(io, watch);
    }
  };
  ::asio::post(io, watch);
  io.run();
  EXPECT_FALSE(client);
  expect_shutdown(r, "destroyed by a coroutine");
}

// --- Client ---

class ClientLifetime : public ::testing::TestWithParam<std::size_t> {
 protected:
  void SetUp() override { ASSERT_TRUE(server().sync()); }
};

TEST_P(ClientLifetime, DestroyedWhileRequestsWait) {
  const WaitingPlace& place = all_places()[GetParam()];
  server().script(place.script);
  Config config = lifetime_config();
  if (place.config) place.config(config);

  auto client = std::make_unique<Client>(config);
  std::vector<std::optional<Result>> results(static_cast<std::size_t>(place.requests));
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back(
        [c = client.get(), &out = results[i]] { out.emplace(c->get(server().url("/wait"))); });
    ASSERT_TRUE(eventually([&] { return client->stats().in_flight == i + 1; }))
        << "request " << i << " never started";
    if (i + 1 < results.size()) {
      ASSERT_TRUE(eventually([&] { return client->stats().transfers_in_flight == 1; }));
    }
  }
  ASSERT_TRUE(eventually([&] { return place.reached(client->stats(), server()); }))
      << place.name << " never reached";

  // The destructor cancels the requests and waits for them: on a thread of its own,
  // so that a destructor that hung would fail this test, not stall it.
  std::atomic<bool> destroyed{false};
  std::thread destroyer([&] {
    client.reset();
    destroyed = true;
  });
  const bool returned = eventually([&] { return destroyed.load(); });
  if (!returned) {
    ADD_FAILURE() << "~Client did not return with requests " << place.name;
    std::abort();  // the threads still hold the client: nothing safe is left to do
  }
  destroyer.join();
  for (auto& t : threads) t.join();
  for (std::size_t i = 0; i < results.size(); ++i)
    expect_shutdown(results[i], place.name + " request " + std::to_string(i));
}

INSTANTIATE_TEST_SUITE_P(WaitingPlaces, ClientLifetime,
                         ::testing::Range<std::size_t>(0, all_places().size()),
                         [](const ::testing::TestParamInfo<std::size_t>& p) {
                           return all_places()[p.param].name;
                         });

TEST(ClientLifetimeTest, CancellationByTheCallerIsStillCancelled) {
  ASSERT_TRUE(server().sync());
  server().script(always({Action::hold()}));
  Client client(lifetime_config());
  std::stop_source stop;
  std::optional<Result> r;
  std::thread t([&] {
    const Context ctx(SteadyClock{}, stop.get_token());
    r.emplace(client.request({.url = server().url("/x")}, ctx));
  });
  ASSERT_TRUE(eventually([&] { return client.stats().transfers_in_flight == 1; }));
  stop.request_stop();
  t.join();
  ASSERT_TRUE(r && !*r);
  EXPECT_EQ(r->error().kind, ErrorKind::cancelled);
  EXPECT_EQ(r->error().reason, Reason::cancelled);
}

}  // namespace
}  // namespace bulwark::http
