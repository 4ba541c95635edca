#include "bulwark/prometheus_cpp/collector.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

namespace bulwark::prometheus_cpp {
namespace {

using ::prometheus::ClientMetric;
using ::prometheus::MetricFamily;
using ::prometheus::MetricType;

std::string problem(std::size_t line, std::string_view what) {
  return "line " + std::to_string(line) + ": " + std::string(what);
}

bool is_name_char(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
         (!first && c >= '0' && c <= '9');
}

// Reads a metric or label name at the start of `s`; empty if there is none.
std::string_view take_name(std::string_view& s) {
  std::size_t n = 0;
  while (n < s.size() && is_name_char(s[n], n == 0)) ++n;
  std::string_view name = s.substr(0, n);
  s.remove_prefix(n);
  return name;
}

bool parse_value(std::string_view s, double& out) {
  if (s == "+Inf" || s == "Inf") {
    out = std::numeric_limits<double>::infinity();
    return true;
  }
  if (s == "-Inf") {
    out = -std::numeric_limits<double>::infinity();
    return true;
  }
  if (s == "NaN") {
    out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

std::optional<MetricType> parse_type(std::string_view s) {
  if (s == "counter") return MetricType::Counter;
  if (s == "gauge") return MetricType::Gauge;
  if (s == "histogram") return MetricType::Histogram;
  if (s == "summary") return MetricType::Summary;
  if (s == "untyped") return MetricType::Untyped;
  return std::nullopt;
}

// HELP text escapes \\ and \n.
std::string unescape_help(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && (s[i + 1] == '\\' || s[i + 1] == 'n')) {
      out.push_back(s[i + 1] == 'n' ? '\n' : '\\');
      ++i;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

struct Sample {
  std::string_view name;
  std::vector<ClientMetric::Label> labels;
  double value = 0;
};

// `name{a="x",b="y"} value [timestamp]`: returns an empty string or the problem.
std::string parse_sample(std::string_view s, Sample& out) {
  out.name = take_name(s);
  if (out.name.empty()) return "expected a metric name";
  if (!s.empty() && s.front() == '{') {
    s.remove_prefix(1);
    while (true) {
      if (!s.empty() && s.front() == '}') {
        s.remove_prefix(1);
        break;
      }
      std::string_view label = take_name(s);
      if (label.empty()) return "expected a label name";
      if (s.size() < 2 || s[0] != '=' || s[1] != '"') return "expected =\" after a label name";
      s.remove_prefix(2);
      std::string value;
      bool closed = false;
      while (!s.empty()) {
        char c = s.front();
        s.remove_prefix(1);
        if (c == '"') {
          closed = true;
          break;
        }
        if (c == '\\') {
          if (s.empty()) break;
          char e = s.front();
          s.remove_prefix(1);
          if (e == 'n') {
            value.push_back('\n');
          } else if (e == '\\' || e == '"') {
            value.push_back(e);
          } else {
            return "an unknown escape in a label value";
          }
        } else {
          value.push_back(c);
        }
      }
      if (!closed) return "a label value without its closing quote";
      out.labels.push_back({std::string(label), std::move(value)});
      if (!s.empty() && s.front() == ',') s.remove_prefix(1);
    }
  }
  if (s.empty() || s.front() != ' ') return "expected a space before the value";
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  std::string_view value = s.substr(0, s.find(' '));
  if (!parse_value(value, out.value))
    return "the value '" + std::string(value) + "' is not a number";
  return {};
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() > suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The family a sample belongs to, and its suffix (_bucket, _sum, _count) for histograms
// and summaries.
struct Target {
  std::string family;
  std::string_view suffix;
};

class Parser {
 public:
  explicit Parser(std::vector<MetricFamily>& families) : families_(families) {
    for (std::size_t i = 0; i < families_.size(); ++i) index_[families_[i].name] = i;
  }

  std::string line(std::size_t number, std::string_view s) {
    if (s.empty()) return {};
    if (s.front() == '#') return comment(number, s);
    Sample sample;
    if (std::string p = parse_sample(s, sample); !p.empty()) return problem(number, p);
    Target t = target(sample.name);
    MetricFamily& f = family(t.family);
    if (f.type == MetricType::Histogram || f.type == MetricType::Summary) {
      return compound(number, f, t.suffix, sample);
    }
    ClientMetric m;
    m.label = std::move(sample.labels);
    switch (f.type) {
      case MetricType::Counter:
        m.counter.value = sample.value;
        break;
      case MetricType::Gauge:
        m.gauge.value = sample.value;
        break;
      default:
        m.untyped.value = sample.value;
        break;
    }
    f.metric.push_back(std::move(m));
    return {};
  }

 private:
  std::string comment(std::size_t number, std::string_view s) {
    s.remove_prefix(1);
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    bool help = s.starts_with("HELP ");
    bool type = s.starts_with("TYPE ");
    if (!help && !type) return {};  // a plain comment
    s.remove_prefix(5);
    std::string_view name = take_name(s);
    if (name.empty()) return problem(number, "expected a metric name after HELP or TYPE");
    if (!s.empty()) s.remove_prefix(1);
    MetricFamily& f = family(std::string(name));
    if (help) {
      if (f.help.empty()) f.help = unescape_help(s);
      return {};
    }
    std::optional<MetricType> t = parse_type(s);
    if (!t) return problem(number, "unknown metric type '" + std::string(s) + "'");
    if (!f.metric.empty() && f.type != *t) {
      return problem(number, "the family " + f.name + " was already read with another type");
    }
    f.type = *t;
    return {};
  }

  Target target(std::string_view name) {
    for (std::string_view suffix : {"_bucket", "_sum", "_count"}) {
      if (!ends_with(name, suffix)) continue;
      std::string base(name.substr(0, name.size() - suffix.size()));
      auto it = index_.find(base);
      if (it != index_.end()) {
        MetricType type = families_[it->second].type;
        if (type == MetricType::Histogram || (type == MetricType::Summary && suffix != "_bucket")) {
          return {std::move(base), suffix};
        }
      }
    }
    return {std::string(name), {}};
  }

  // One line of a histogram or a summary: found or added to the series with the same
  // labels (less `le` or `quantile`).
  std::string compound(std::size_t number, MetricFamily& f, std::string_view suffix,
                       Sample& sample) {
    bool histogram = f.type == MetricType::Histogram;
    std::string_view special = histogram ? "le" : "quantile";
    std::optional<double> bound;
    std::vector<ClientMetric::Label> labels;
    for (auto& l : sample.labels) {
      if (l.name == special && (histogram ? suffix == "_bucket" : suffix.empty())) {
        double b = 0;
        if (!parse_value(l.value, b))
          return problem(number, "the " + l.name + " label is not a number");
        bound = b;
      } else {
        labels.push_back(std::move(l));
      }
    }
    std::sort(labels.begin(), labels.end());
    auto& series = series_[f.name];
    auto it = series.find(labels);
    if (it == series.end()) {
      ClientMetric m;
      m.label = labels;
      f.metric.push_back(std::move(m));
      it = series.emplace(std::move(labels), f.metric.size() - 1).first;
    }
    ClientMetric& m = f.metric[it->second];
    if (suffix == "_sum") {
      (histogram ? m.histogram.sample_sum : m.summary.sample_sum) = sample.value;
    } else if (suffix == "_count") {
      auto count = static_cast<std::uint64_t>(std::max(0.0, sample.value));
      (histogram ? m.histogram.sample_count : m.summary.sample_count) = count;
    } else if (!bound) {
      return problem(number, "a " + std::string(histogram ? "bucket" : "quantile") +
                                 " without its " + std::string(special) + " label");
    } else if (histogram) {
      m.histogram.bucket.push_back(
          {static_cast<std::uint64_t>(std::max(0.0, sample.value)), *bound});
    } else {
      m.summary.quantile.push_back({*bound, sample.value});
    }
    return {};
  }

  MetricFamily& family(const std::string& name) {
    auto [it, added] = index_.emplace(name, families_.size());
    if (added) {
      families_.emplace_back();
      families_.back().name = name;
    }
    return families_[it->second];
  }

  std::vector<MetricFamily>& families_;
  std::map<std::string, std::size_t, std::less<>> index_;
  // Per histogram or summary family: its series by label set, as indexes into .metric.
  // Only the series of this text: a merged family's earlier series are not extended.
  std::map<std::string, std::map<std::vector<ClientMetric::Label>, std::size_t>> series_;
};

}  // namespace

std::string parse_exposition(std::string_view text, std::vector<MetricFamily>& families) {
  Parser parser(families);
  std::size_t number = 0;
  while (!text.empty()) {
    ++number;
    std::size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    if (std::string p = parser.line(number, line); !p.empty()) return p;
  }
  return {};
}

SourceId Collector::add(Source writer) {
  std::lock_guard lock(mutex_);
  SourceId id{next_id_++};
  sources_.push_back({id, std::move(writer)});
  return id;
}

bool Collector::remove(SourceId id) {
  std::lock_guard lock(mutex_);
  auto it =
      std::find_if(sources_.begin(), sources_.end(), [id](const Entry& e) { return e.id == id; });
  if (it == sources_.end()) return false;
  sources_.erase(it);
  return true;
}

std::string Collector::last_error() const {
  std::lock_guard lock(mutex_);
  return last_error_;
}

std::vector<MetricFamily> Collector::Collect() const {
  // Held for the whole scrape: remove() waits for a scrape reading its source, so the
  // source may be destroyed as soon as remove() returns.
  std::lock_guard lock(mutex_);
  std::vector<MetricFamily> families;
  for (const Entry& e : sources_) {
    std::ostringstream out;
    e.writer(out);
    if (std::string p = parse_exposition(out.str(), families); !p.empty()) {
      ++errors_;
      last_error_ = "source " + std::to_string(static_cast<std::size_t>(e.id)) + ", " + p;
    }
  }
  // A family announced but without a series is left out, as prometheus-cpp does.
  std::erase_if(families, [](const MetricFamily& f) { return f.metric.empty(); });
  MetricFamily errors;
  errors.name = "bulwark_prometheus_cpp_parse_errors_total";
  errors.help = "Scrapes in which a source's text could not be read completely (see last_error())";
  errors.type = ::prometheus::MetricType::Counter;
  errors.metric.emplace_back().counter.value = static_cast<double>(errors_);
  families.push_back(std::move(errors));
  return families;
}

}  // namespace bulwark::prometheus_cpp
