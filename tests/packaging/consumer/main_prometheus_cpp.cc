#include <bulwark/prometheus_cpp/collector.h>
#include <bulwark/registry.h>
#include <prometheus/text_serializer.h>

#include <cstdio>
#include <string>

int main() {
  bulwark::Registry<std::string> hosts({.name = "hosts", .breaker = {.name = "consumer"}});
  (void)hosts.get("a");
  bulwark::prometheus_cpp::Collector collector;
  collector.add(hosts);
  const std::string text = prometheus::TextSerializer().Serialize(collector.Collect());
  const bool ok =
      text.find("bulwark_circuitbreaker_state{name=\"consumer\",key=\"a\",state=\"closed\"} 1") !=
      std::string::npos;
  std::printf("prometheus_cpp: %s\n", ok ? "ok" : "failed");
  return ok ? 0 : 1;
}
