// What the HTTP client tests (Client and AsyncClient) share about a host's adaptive
// limit (Config::adaptive_limit): a limit that stays where it starts, a log of the
// rejection events it causes, and its series in the client's metrics. The upstream that
// fills the limit is Upstream::Holding (upstream.h).

#ifndef BULWARK_TESTS_HTTP_ADAPTIVE_SETUP_H_
#define BULWARK_TESTS_HTTP_ADAPTIVE_SETUP_H_

#include <cstdint>
#include <mutex>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "bulwark/adaptive_limit.h"
#include "bulwark/observe.h"

namespace bulwark::testing {

// An AIMD limit that starts at `limit` (within 1 to 10) and whose windows (100 settled
// calls) are longer than a test: it stays at `limit`.
inline AdaptiveLimitConfig steady_adaptive_limit(std::string name, std::uint32_t limit) {
  AdaptiveLimitConfig a;
  a.name = std::move(name);
  a.algorithm = AdaptiveAlgorithm::aimd;
  a.min_limit = 1;
  a.initial_limit = limit;
  a.max_limit = 10;
  a.window_samples = 100;
  return a;
}

// The rejection events a client publishes, each as "<name> <key>" (for a host's limit:
// "<limit name> <origin>"), from whichever thread publishes them.
class RejectionLog {
 public:
  template <class Client>
  explicit RejectionLog(Client& client)
      : sub_(client.subscribe(EventKind::rejection, [this](const Event& e) {
          std::lock_guard lock(mu_);
          seen_.push_back(std::string(e.name) + " " + std::string(e.key));
        })) {}
  std::vector<std::string> seen() const {
    std::lock_guard lock(mu_);
    return seen_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> seen_;
  Subscription sub_;  // last: unsubscribed before the log goes
};

// True when the exposition `text` has `line` as a whole line.
inline bool has_line(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

// A host's adaptive limit as the client's metrics print it: the values of
// bulwark_adaptive_limit, _inflight and _rejections_total, "" where a series is missing.
struct AdaptiveSeries {
  std::string limit;
  std::string inflight;
  std::string rejections;
  bool operator==(const AdaptiveSeries&) const = default;
  friend std::ostream& operator<<(std::ostream& os, const AdaptiveSeries& s) {
    return os << "{limit " << s.limit << ", inflight " << s.inflight << ", rejections "
              << s.rejections << "}";
  }
};

// Reads the series of the limit named `limit_name` on the host `origin` (scheme://host:port)
// from the exposition `text`.
inline AdaptiveSeries adaptive_series(const std::string& text, const std::string& limit_name,
                                      const std::string& origin) {
  const std::string labels = "{name=\"" + limit_name + " " + origin + "\"} ";
  auto value = [&](const std::string& family) -> std::string {
    const std::string head = "\n" + family + labels;
    const auto at = text.find(head);
    if (at == std::string::npos) return "";
    const auto from = at + head.size();
    return text.substr(from, text.find('\n', from) - from);
  };
  return {value("bulwark_adaptive_limit"), value("bulwark_adaptive_inflight"),
          value("bulwark_adaptive_rejections_total")};
}

}  // namespace bulwark::testing

#endif  // BULWARK_TESTS_HTTP_ADAPTIVE_SETUP_H_
