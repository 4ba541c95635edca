// A GET to a loopback server through bulwark::http::Client against bare libcurl with
// the same reuse (one easy handle, one kept-alive connection). The figure is the ratio
// BM_ClientGet / BM_BareCurlGet of one run:
//
//   build/release/bench/http/bulwark_http_bench --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true   (one line)

#include <benchmark/benchmark.h>
#include <curl/curl.h>
#include <httplib.h>

#include <chrono>
#include <csignal>
#include <string>
#include <thread>

#include "bulwark/http/client.h"

namespace {

class Server {
 public:
  Server() {
    std::signal(SIGPIPE, SIG_IGN);
    server_.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("{\"reviews\":[]}", "application/json");
    });
    server_.set_tcp_nodelay(true);  // else delayed ACKs dominate a loopback round trip
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~Server() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/"; }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

Server& server() {
  static Server s;
  return s;
}

std::size_t collect(char* p, std::size_t size, std::size_t n, void* user) {
  static_cast<std::string*>(user)->append(p, size * n);
  return size * n;
}

void BM_BareCurlGet(benchmark::State& state) {
  const std::string url = server().url();
  curl_global_init(CURL_GLOBAL_DEFAULT);
  CURL* h = curl_easy_init();
  std::string body;
  for (auto _ : state) {
    body.clear();
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 10000L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
    if (curl_easy_perform(h) != CURLE_OK) state.SkipWithError("transfer failed");
    benchmark::DoNotOptimize(body.data());
  }
  curl_easy_cleanup(h);
}
BENCHMARK(BM_BareCurlGet)->UseRealTime();

void BM_ClientGet(benchmark::State& state) {
  const std::string url = server().url();
  bulwark::http::Config config;  // named: GCC 12 warns falsely on a temporary's std::function
  config.name = "bench";
  bulwark::http::Client client(config);
  for (auto _ : state) {
    auto r = client.get(url);
    if (!r) state.SkipWithError("request failed");
    benchmark::DoNotOptimize(r->body.data());
  }
  state.counters["handles"] = static_cast<double>(client.stats().handles_created);
}
BENCHMARK(BM_ClientGet)->UseRealTime();

}  // namespace
