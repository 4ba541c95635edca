#include <bulwark/http/client.h>

#include <chrono>
#include <cstdio>

int main() {
  using namespace std::chrono_literals;
  bulwark::http::Client client({.name = "consumer", .retry = {.max_attempts = 1}});
  // Reaches libcurl: a URL it refuses to send ends as invalid_request before any I/O.
  auto r = client.request({.url = "ftp://example.invalid/", .timeout = 1s});
  const bool ok = !r && r.error().kind == bulwark::http::ErrorKind::invalid_request;
  std::printf("http: %s\n", ok ? "ok" : "failed");
  return ok ? 0 : 1;
}
