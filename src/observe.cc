#include "bulwark/observe.h"

#include <algorithm>
#include <charconv>
#include <string>
#include <type_traits>

namespace bulwark {
namespace {

bool needs_quotes(std::string_view v) {
  if (v.empty()) return true;
  return std::any_of(v.begin(), v.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u <= 0x20 || u == 0x7f || c == '=' || c == '"' || c == '\\';
  });
}

void append_value(std::string& out, std::string_view v) {
  if (!needs_quotes(v)) {
    out.append(v);
    return;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  for (char c : v) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out.append("\\\"");
        break;
      case '\\':
        out.append("\\\\");
        break;
      case '\n':
        out.append("\\n");
        break;
      case '\r':
        out.append("\\r");
        break;
      case '\t':
        out.append("\\t");
        break;
      default:
        if (u < 0x20 || u == 0x7f) {
          out.append("\\u00");
          out.push_back(kHex[u >> 4]);
          out.push_back(kHex[u & 0xf]);
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

void append_field(std::string& out, std::string_view name, std::string_view value) {
  if (!out.empty()) out.push_back(' ');
  out.append(name);
  out.push_back('=');
  append_value(out, value);
}

void append_seconds(std::string& out, std::string_view name, Ticks nanos) {
  char buf[64];
  std::string_view text;
  if (nanos == kTicksMax) {
    text = "inf";
  } else {
    const double s = static_cast<double>(nanos) / 1e9;
    const auto r = std::to_chars(buf, buf + sizeof buf, s);
    text = std::string_view(buf, static_cast<std::size_t>(r.ptr - buf));
  }
  append_field(out, name, text);
}

}  // namespace

void append_logfmt(std::string& out, const Event& e) {
  std::string line;
  append_field(line, "event", to_string(e.kind));
  append_field(line, "name", e.name);
  if (!e.key.empty()) append_field(line, "key", e.key);
  std::visit(
      [&](const auto& info) {
        using T = std::decay_t<decltype(info)>;
        if constexpr (std::is_same_v<T, TransitionInfo>) {
          append_field(line, "from", to_string(info.from));
          append_field(line, "to", to_string(info.to));
          append_field(line, "reason", to_string(info.reason));
        } else if constexpr (std::is_same_v<T, RejectionInfo>) {
          append_field(line, "reason", to_string(info.reason));
          append_seconds(line, "retry_after", info.retry_after.count());
        } else if constexpr (std::is_same_v<T, FallbackInfo>) {
          append_field(line, "kind", to_string(info.kind));
          if (!info.reason.empty()) append_field(line, "reason", info.reason);
        } else if constexpr (std::is_same_v<T, FlappingInfo>) {
          append_field(line, "flapping", info.flapping ? "true" : "false");
          append_seconds(line, "period", info.period.count());
        } else if constexpr (std::is_same_v<T, BulkheadRejectionInfo>) {
          append_field(line, "component", "bulkhead");
          append_field(line, "reason", to_string(info.reason));
        } else if constexpr (std::is_same_v<T, RetryInfo>) {
          append_field(line, "attempt", std::to_string(info.attempt));
          append_field(line, "retry_after", to_string(info.retry_after));
          if (info.retry_after == RetryAfterUse::honoured)
            append_seconds(line, "delay", info.retry_after_delay.count());
        } else if constexpr (std::is_same_v<T, KeyInfo>) {
          if (e.kind == EventKind::key_evicted) append_seconds(line, "idle", info.idle.count());
        }
      },
      e.info);
  append_seconds(line, "at", e.at);
  out.append(line);
}

std::string to_logfmt(const Event& event) {
  std::string out;
  append_logfmt(out, event);
  return out;
}

Subscription EventHub::subscribe(EventMask mask, EventListener listener) {
  return Subscription(this, listeners_.add(std::move(listener), mask.bits()));
}

bool EventHub::unsubscribe(ListenerId id) { return listeners_.remove(id); }

}  // namespace bulwark
