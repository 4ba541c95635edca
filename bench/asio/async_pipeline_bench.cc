// What the async pipeline costs, against baselines measured in the same run:
//
//   BM_Asio_BareCoAwait               co_await of an immediately ready awaitable
//   BM_Asio_Pipeline_Direct           the same call through breaker, bulkhead and retry
//                                     (no deadline: the attempt is awaited in place)
//   BM_Asio_Pipeline_Deadline         ... with a request deadline and a per-attempt
//                                     timeout (the attempt is a coroutine of its own,
//                                     a timer races it)
//   BM_Asio_Pipeline_Hedged           ... and a hedge stage (that never fires)
//   BM_Asio_Echo_Bare / _Pipeline     round trips through a loopback echo server on
//                                     one connection, client and server on one thread,
//                                     without and with the whole pipeline (items/s is
//                                     requests per second)
//
// Each reports allocs_per_call: heap allocations per call once warm (this binary
// counts operator new and aligned_alloc, which Asio's frame allocator uses). Asio
// serves coroutine frames from a per-thread cache of two freed frames; a call with
// more frames alive at once than that allocates the rest. The same source built with
// ASIO_DISABLE_AWAITABLE_FRAME_RECYCLING (bulwark_asio_bench_frames) allocates every
// frame, and reports the count as frames_per_call: how many coroutine frames one
// call creates. Everything runs on one thread inside io_context::run().

#include <benchmark/benchmark.h>

#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <atomic>
#include <cstdlib>
#include <new>
#include <string>

#include "bulwark/asio/pipeline.h"

namespace {
std::atomic<std::uint64_t> g_allocations{0};
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
// Asio allocates its frames and handlers with std::aligned_alloc, not operator new.
// With its frame cache off, frames come from operator new, and only they are counted.
extern "C" void* aligned_alloc(std::size_t alignment, std::size_t size) noexcept {
#if !defined(ASIO_DISABLE_AWAITABLE_FRAME_RECYCLING)
  g_allocations.fetch_add(1, std::memory_order_relaxed);
#endif
  void* p = nullptr;
  if (alignment < sizeof(void*)) alignment = sizeof(void*);
  return posix_memalign(&p, alignment, size == 0 ? 1 : size) == 0 ? p : nullptr;
}

namespace {

using namespace std::chrono_literals;
using ::asio::experimental::as_tuple;
using ::asio::ip::tcp;

struct Err {
  int code = 0;
};
using Reply = bulwark::Expected<int, Err>;

::asio::awaitable<Reply> ready() { co_return 1; }

bulwark::BreakerConfig breaker_config() {
  bulwark::BreakerConfig c;
  c.name = "bench";
  c.consecutive_failures = 5;
  return c;
}

// The policies of one dependency.
struct Policies {
  bulwark::CircuitBreaker breaker{breaker_config()};
  bulwark::asio::AsyncBulkhead pool{{.name = "bench", .max_concurrent = 64}};
  bulwark::RetryBudget budget{{.name = "bench"}};
  bulwark::Retry retry{{.name = "bench", .max_attempts = 3}, &budget};
};

// Runs `body(state)` as a coroutine on a fresh io_context, on this thread.
template <class Body>
void run_on_io(benchmark::State& state, Body body) {
  ::asio::io_context io(1);
  ::asio::co_spawn(io, body(state), ::asio::detached);
  io.run();
}

#if defined(ASIO_DISABLE_AWAITABLE_FRAME_RECYCLING)
constexpr const char* kPerCall = "frames_per_call";
#else
constexpr const char* kPerCall = "allocs_per_call";
#endif

void report_allocations(benchmark::State& state, std::uint64_t before) {
  const auto n = static_cast<double>(state.iterations());
  state.counters[kPerCall] = n > 0 ? static_cast<double>(g_allocations.load() - before) / n : 0.0;
}

void BM_Asio_BareCoAwait(benchmark::State& state) {
  run_on_io(state, [](benchmark::State& s) -> ::asio::awaitable<void> {
    for (int i = 0; i < 100; ++i) (void)co_await ready();  // warm the frame cache
    const auto before = g_allocations.load();
    for (auto _ : s) {
      auto r = co_await ready();
      benchmark::DoNotOptimize(r);
    }
    report_allocations(s, before);
  });
}
BENCHMARK(BM_Asio_BareCoAwait);

// The floor of any pipeline that is an asio::awaitable: a coroutine of its own that does
// nothing but co_await the call and return its result (two frames, like the pipeline).
::asio::awaitable<Reply> wrapper() { co_return co_await ready(); }

void BM_Asio_WrapperCoAwait(benchmark::State& state) {
  run_on_io(state, [](benchmark::State& s) -> ::asio::awaitable<void> {
    for (int i = 0; i < 100; ++i) (void)co_await wrapper();
    const auto before = g_allocations.load();
    for (auto _ : s) {
      auto r = co_await wrapper();
      benchmark::DoNotOptimize(r);
    }
    report_allocations(s, before);
  });
}
BENCHMARK(BM_Asio_WrapperCoAwait);

template <class MakePipeline, class MakeContext>
void pipeline_bench(benchmark::State& state, MakePipeline make, MakeContext make_ctx) {
  Policies policies;
  auto p = make(policies);
  run_on_io(state, [&](benchmark::State& s) -> ::asio::awaitable<void> {
    auto call = [](const bulwark::Context&) { return ready(); };
    for (int i = 0; i < 100; ++i) (void)co_await p(make_ctx(), call);
    const auto before = g_allocations.load();
    for (auto _ : s) {
      auto r = co_await p(make_ctx(), call);
      benchmark::DoNotOptimize(r);
    }
    report_allocations(s, before);
  });
}

bulwark::Context no_deadline() { return bulwark::Context(); }
bulwark::Context with_deadline() {
  return bulwark::Context(bulwark::SteadyClock{}, {},
                          bulwark::Deadline::after(bulwark::SteadyClock{}, 1s));
}

void BM_Asio_Pipeline_Direct(benchmark::State& state) {
  pipeline_bench(
      state,
      [](Policies& x) {
        return bulwark::asio::pipeline(bulwark::breaker(x.breaker), bulwark::asio::bulkhead(x.pool),
                                       bulwark::retry(x.retry));
      },
      no_deadline);
}
BENCHMARK(BM_Asio_Pipeline_Direct);

// Where the pipeline's time goes: the same call with no stage, then each stage alone.
void BM_Asio_Pipeline_NoStage(benchmark::State& state) {
  pipeline_bench(
      state, [](Policies&) { return bulwark::asio::pipeline(); }, no_deadline);
}
BENCHMARK(BM_Asio_Pipeline_NoStage);

void BM_Asio_Pipeline_BreakerOnly(benchmark::State& state) {
  pipeline_bench(
      state, [](Policies& x) { return bulwark::asio::pipeline(bulwark::breaker(x.breaker)); },
      no_deadline);
}
BENCHMARK(BM_Asio_Pipeline_BreakerOnly);

void BM_Asio_Pipeline_BulkheadOnly(benchmark::State& state) {
  pipeline_bench(
      state, [](Policies& x) { return bulwark::asio::pipeline(bulwark::asio::bulkhead(x.pool)); },
      no_deadline);
}
BENCHMARK(BM_Asio_Pipeline_BulkheadOnly);

void BM_Asio_Pipeline_RetryOnly(benchmark::State& state) {
  pipeline_bench(
      state, [](Policies& x) { return bulwark::asio::pipeline(bulwark::retry(x.retry)); },
      no_deadline);
}
BENCHMARK(BM_Asio_Pipeline_RetryOnly);

void BM_Asio_Pipeline_Deadline(benchmark::State& state) {
  pipeline_bench(
      state,
      [](Policies& x) {
        return bulwark::asio::pipeline(bulwark::breaker(x.breaker), bulwark::asio::bulkhead(x.pool),
                                       bulwark::retry(x.retry), bulwark::timeout(500ms));
      },
      with_deadline);
}
BENCHMARK(BM_Asio_Pipeline_Deadline);

void BM_Asio_Pipeline_Hedged(benchmark::State& state) {
  pipeline_bench(
      state,
      [](Policies& x) {
        return bulwark::asio::pipeline(
            bulwark::breaker(x.breaker), bulwark::asio::bulkhead(x.pool), bulwark::retry(x.retry),
            bulwark::asio::hedge({.max_hedges = 1, .delay = bulwark::asio::HedgeDelay::fixed(1s)}),
            bulwark::timeout(500ms));
      },
      with_deadline);
}
BENCHMARK(BM_Asio_Pipeline_Hedged);

// --- A loopback echo server: one line in, the same line out. ---

::asio::awaitable<void> echo_session(tcp::socket socket) {
  std::string buf;
  for (;;) {
    auto [ec, n] = co_await ::asio::async_read_until(socket, ::asio::dynamic_buffer(buf), '\n',
                                                     as_tuple(::asio::use_awaitable));
    if (ec) co_return;
    auto [wec, w] = co_await ::asio::async_write(socket, ::asio::buffer(buf, n),
                                                 as_tuple(::asio::use_awaitable));
    if (wec) co_return;
    buf.erase(0, n);
  }
}

::asio::awaitable<void> echo_server(tcp::acceptor& acceptor) {
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(as_tuple(::asio::use_awaitable));
    if (ec) co_return;
    ::asio::co_spawn(acceptor.get_executor(), echo_session(std::move(socket)), ::asio::detached);
  }
}

// One request on a connection the client keeps open.
::asio::awaitable<Reply> echo_once(tcp::socket& socket, std::string& buf) {
  static const std::string line = "ping\n";
  auto [wec, w] =
      co_await ::asio::async_write(socket, ::asio::buffer(line), as_tuple(::asio::use_awaitable));
  if (wec) co_return bulwark::Unexpected(Err{wec.value()});
  auto [ec, n] = co_await ::asio::async_read_until(socket, ::asio::dynamic_buffer(buf), '\n',
                                                   as_tuple(::asio::use_awaitable));
  if (ec) co_return bulwark::Unexpected(Err{ec.value()});
  buf.erase(0, n);
  co_return static_cast<int>(n);
}

// One connection, one request at a time, the client and the server on this thread:
// each iteration is one round trip (write a line, read it back).
template <bool kPipeline>
void echo_bench(benchmark::State& state) {
  ::asio::io_context io(1);
  tcp::acceptor acceptor(io, tcp::endpoint(::asio::ip::address_v4::loopback(), 0));
  ::asio::co_spawn(io, echo_server(acceptor), ::asio::detached);
  Policies policies;
  auto p = bulwark::asio::pipeline(bulwark::breaker(policies.breaker),
                                   bulwark::asio::bulkhead(policies.pool),
                                   bulwark::retry(policies.retry), bulwark::timeout(1s));
  auto client = [&]() -> ::asio::awaitable<void> {
    tcp::socket socket(io);
    co_await socket.async_connect(acceptor.local_endpoint(), ::asio::use_awaitable);
    std::string buf;
    auto once = [&]() -> ::asio::awaitable<Reply> {
      if constexpr (kPipeline) {
        auto r = co_await p(with_deadline(),
                            [&](const bulwark::Context&) { return echo_once(socket, buf); });
        co_return r ? Reply(*r) : Reply(bulwark::Unexpected(Err{-1}));
      } else {
        co_return co_await echo_once(socket, buf);
      }
    };
    for (int i = 0; i < 100; ++i) (void)co_await once();
    const auto before = g_allocations.load();
    for (auto _ : state) {
      auto r = co_await once();
      if (!r) state.SkipWithError("echo failed");
      benchmark::DoNotOptimize(r);
    }
    report_allocations(state, before);
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
    acceptor.close();
  };
  ::asio::co_spawn(io, client, ::asio::detached);
  io.run();
}
void BM_Asio_Echo_Bare(benchmark::State& state) { echo_bench<false>(state); }
void BM_Asio_Echo_Pipeline(benchmark::State& state) { echo_bench<true>(state); }
BENCHMARK(BM_Asio_Echo_Bare);
BENCHMARK(BM_Asio_Echo_Pipeline);

}  // namespace
