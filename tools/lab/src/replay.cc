#include "bulwark/lab/replay.h"

#include <stdio.h>  // getline, fmemopen, open_memstream, fseeko (POSIX)
#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "breakers.h"
#include "bulwark/lab/input_error.h"

namespace bulwark::lab {
namespace {

constexpr std::size_t kMaxLine = 1 << 20;
// A key names a breaker: a service, a host, an operation.
constexpr std::size_t kMaxKeyBytes = 1024;
// Replay keeps every key's breaker to the end (the summary reports each), so the
// number of distinct keys is bounded by what their breakers take: at most this much.
constexpr std::size_t kMaxKeyMemory = std::size_t{256} << 20;
// Times and durations up to 4e12 ms (~126 years, enough for Unix-epoch milliseconds):
// their sum still fits in 64-bit nanoseconds.
constexpr std::uint64_t kMaxNanos = 4'000'000'000'000'000'000;

bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

// Decimal milliseconds, read exactly as nanoseconds: no binary floating point between
// the text and the tick, so 1732000000000.000001 is that many nanoseconds and a
// completion at t + d meets an arrival written as t + d exactly.
struct Millis {
  enum class Status : std::uint8_t { ok, not_a_number, not_finite, too_precise, too_large };
  Status status = Status::not_a_number;
  Ticks ns = 0;
};

bool equals_lower(std::string_view s, std::string_view lower) {
  if (s.size() != lower.size()) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i] >= 'A' && s[i] <= 'Z' ? static_cast<char>(s[i] - 'A' + 'a') : s[i];
    if (c != lower[i]) return false;
  }
  return true;
}

// [digits][.digits][(e|E)[+|-]digits], at least one mantissa digit; no sign, no spaces.
Millis parse_millis(std::string_view s) {
  using Status = Millis::Status;
  if (equals_lower(s, "inf") || equals_lower(s, "infinity") || equals_lower(s, "nan")) {
    return {Status::not_finite, 0};
  }
  const auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  std::size_t i = 0;
  while (i < s.size() && is_digit(s[i])) ++i;
  const std::size_t int_end = i;  // the integer digits are s[0, int_end)
  std::size_t frac_begin = i, frac_end = i;
  if (i < s.size() && s[i] == '.') {
    frac_begin = ++i;
    while (i < s.size() && is_digit(s[i])) ++i;
    frac_end = i;
  }
  if (int_end == 0 && frac_end == frac_begin) return {};  // no digit at all
  std::int64_t exponent = 0;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    bool minus = false;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) minus = s[i++] == '-';
    if (i == s.size()) return {};
    for (; i < s.size() && is_digit(s[i]); ++i) {
      exponent = std::min<std::int64_t>(exponent * 10 + (s[i] - '0'), 1'000'000'000);
    }
    if (minus) exponent = -exponent;
  }
  if (i != s.size()) return {};

  // The mantissa's digits, the integer's then the fraction's: digit(k) for k in
  // [0, count). Digit k weighs 10^(point - 1 - k) ms = 10^(point + 5 - k) ns.
  const std::size_t count = int_end + (frac_end - frac_begin);
  const auto digit = [&](std::size_t k) {
    return s[k < int_end ? k : frac_begin + (k - int_end)] - '0';
  };
  const std::int64_t point = static_cast<std::int64_t>(int_end) + exponent;
  std::size_t first = 0;
  while (first < count && digit(first) == 0) ++first;
  if (first == count) return {Status::ok, 0};
  if (point + 5 - static_cast<std::int64_t>(first) > 18) return {Status::too_large, 0};
  static constexpr std::uint64_t kPow10[] = {1,
                                             10,
                                             100,
                                             1'000,
                                             10'000,
                                             100'000,
                                             1'000'000,
                                             10'000'000,
                                             100'000'000,
                                             1'000'000'000,
                                             10'000'000'000,
                                             100'000'000'000,
                                             1'000'000'000'000,
                                             10'000'000'000'000,
                                             100'000'000'000'000,
                                             1'000'000'000'000'000,
                                             10'000'000'000'000'000,
                                             100'000'000'000'000'000,
                                             1'000'000'000'000'000'000};
  std::uint64_t ns = 0;  // at most 19 digits below 10^19: no overflow
  for (std::size_t k = first; k < count; ++k) {
    const int d = digit(k);
    const std::int64_t power = point + 5 - static_cast<std::int64_t>(k);
    if (power < 0) {
      if (d != 0) return {Status::too_precise, 0};
      continue;  // a trailing zero past the nanoseconds changes nothing
    }
    ns += static_cast<std::uint64_t>(d) * kPow10[power];
  }
  if (ns > kMaxNanos) return {Status::too_large, 0};
  return {Status::ok, static_cast<Ticks>(ns)};
}

// Keys are valid UTF-8 (checked when read). Besides what JSON requires, DEL and the C1
// controls (U+0080 to U+009F: U+009B starts an escape sequence on some terminals) are
// escaped too, so the lines are safe to read on a terminal.
void append_json_string(std::string& out, std::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  const auto escape = [&](unsigned c) {
    out += "\\u00";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  };
  out += '"';
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char ch = s[i];
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          escape(c);
        } else if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) < 0xA0) {
          escape(static_cast<unsigned char>(s[++i]));  // C2 80..9F is U+0080..U+009F
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

// Nanoseconds as milliseconds: "120", "0.5", "1234.000001".
void append_ms(std::string& out, Ticks ns) {
  out += std::to_string(ns / 1'000'000);
  Ticks frac = ns % 1'000'000;
  if (frac == 0) return;
  char digits[8];
  std::snprintf(digits, sizeof digits, "%06lld", static_cast<long long>(frac));
  std::string_view d(digits, 6);
  while (!d.empty() && d.back() == '0') d.remove_suffix(1);
  out += '.';
  out += d;
}

// A line for an error message: quoted, escaped, and cut after about 80 bytes (at a
// character boundary).
std::string excerpt(std::string_view line) {
  constexpr std::size_t kMax = 80;
  if (line.size() <= kMax) return quote_for_error(line);
  std::size_t cut = kMax;
  while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) --cut;
  return quote_for_error(line.substr(0, cut)) + "...";
}

// ---- reading the trace --------------------------------------------------------------

enum class Column : std::uint8_t { t_ms, key, duration_ms, outcome };
constexpr std::string_view kColumnNames[] = {"t_ms", "key", "duration_ms", "outcome"};
constexpr std::string_view kHeader = "t_ms,key,duration_ms,outcome";

struct Row {
  Ticks t = 0;
  std::string_view key;
  std::uint32_t key_column = 0;
  Ticks duration = 0;
  Outcome outcome = Outcome::success;
  std::uint64_t line = 0;
};

// Reads a trace row by row, checking everything; optionally copies every line it reads
// to `copy` (the spool for an input that cannot be read twice). Allocation-free per
// row once its buffers have grown to the longest line.
class TraceReader {
 public:
  // Reads at most `max_lines` lines (the header included): the replay pass stops where
  // the checking pass did, even if the file has grown since.
  TraceReader(std::FILE* in, std::string name, std::FILE* copy = nullptr,
              std::uint64_t max_lines = UINT64_MAX)
      : in_(in), name_(std::move(name)), copy_(copy), max_lines_(max_lines) {
    read_header();
  }

  std::uint64_t lines_read() const noexcept { return line_no_; }
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  // The next row, or false at the end of the trace. Throws InputError.
  bool next(Row& row) {
    std::string_view line;
    do {
      if (!read_line(line)) return false;
    } while (line.empty());
    if (const std::size_t cr = line.find('\r'); cr != std::string_view::npos) {
      // getline() splits at LF only: rows that end in a bare CR arrive as one line.
      fail(static_cast<std::uint32_t>(cr + 1), "",
           "holds a carriage return (\\r) that does not end the line: lines must end in LF "
           "or CRLF, not CR alone, and no field may hold a CR (got " +
               excerpt(line) + ")");
    }
    split(line);
    if (fields_.size() != order_.size()) {
      if (fields_.size() < order_.size()) {
        const Column missing = order_[fields_.size()];
        fail(0, name_of(missing),
             "missing field (the row has " + fields(fields_.size()) + "; the header has " +
                 fields(order_.size()) + ")");
      }
      fail(column_of(order_.size()), "",
           "too many fields (the row has " + fields(fields_.size()) + "; the header has " +
               fields(order_.size()) + ")");
    }
    row.line = line_no_;
    for (std::size_t i = 0; i < order_.size(); ++i) {
      const std::string_view v = fields_[i];
      const std::uint32_t col = column_of(i);
      switch (order_[i]) {
        case Column::t_ms:
          row.t = millis(v, col, "t_ms");
          break;
        case Column::duration_ms:
          row.duration = millis(v, col, "duration_ms");
          break;
        case Column::key:
          if (v.size() > kMaxKeyBytes) {
            fail(col, "key",
                 "is longer than " + std::to_string(kMaxKeyBytes) + " bytes (got " +
                     std::to_string(v.size()) + " bytes: " + excerpt(v) + ")");
          }
          if (!valid_utf8(v)) fail(col, "key", "is not valid UTF-8");
          row.key = v;
          row.key_column = col;
          break;
        case Column::outcome:
          if (v == "success") {
            row.outcome = Outcome::success;
          } else if (v == "failure") {
            row.outcome = Outcome::failure;
          } else if (v == "ignored") {
            row.outcome = Outcome::ignored;
          } else {
            fail(col, "outcome",
                 "unknown outcome " + quote_for_error(v) +
                     " (expected success, failure or ignored)");
          }
          break;
      }
    }
    if (row.t < last_t_) {
      std::string now, before;
      append_ms(now, row.t);
      append_ms(before, last_t_);
      fail(column_of(index_of(Column::t_ms)), "t_ms",
           "goes back in time: " + now + " after " + before + " on line " +
               std::to_string(last_line_) + " (rows must be in non-decreasing t_ms)");
    }
    last_t_ = row.t;
    last_line_ = line_no_;
    return true;
  }

 private:
  [[noreturn]] void fail(std::uint32_t column, std::string field, std::string message) const {
    throw InputError({name_, static_cast<std::uint32_t>(line_no_), column}, std::move(field),
                     std::move(message));
  }

  static std::string fields(std::size_t n) {
    return std::to_string(n) + (n == 1 ? " field" : " fields");
  }
  static std::string name_of(Column c) { return std::string(kColumnNames[static_cast<int>(c)]); }
  std::size_t index_of(Column c) const {
    return static_cast<std::size_t>(std::find(order_.begin(), order_.end(), c) - order_.begin());
  }
  // The 1-based character column where field i starts.
  std::uint32_t column_of(std::size_t i) const {
    return i < starts_.size() ? static_cast<std::uint32_t>(starts_[i] + 1) : 0;
  }

  bool read_line(std::string_view& line) {
    if (line_no_ >= max_lines_) return false;
    errno = 0;
    const ssize_t n = ::getline(&line_.data, &line_.capacity, in_);
    if (n < 0) {
      if (std::ferror(in_)) {
        throw InputError({name_, static_cast<std::uint32_t>(line_no_ + 1), 0}, "",
                         std::string("cannot read: ") + std::strerror(errno));
      }
      return false;
    }
    ++line_no_;
    if (copy_ != nullptr && std::fwrite(line_.data, 1, static_cast<std::size_t>(n), copy_) !=
                                static_cast<std::size_t>(n)) {
      throw std::runtime_error("cannot copy " + name_ + " to a temporary file");
    }
    if (static_cast<std::size_t>(n) > kMaxLine) {
      throw InputError({name_, static_cast<std::uint32_t>(line_no_), 0}, "",
                       "line is longer than 1 MiB");
    }
    line = std::string_view(line_.data, static_cast<std::size_t>(n));
    // LF or CRLF ends a line; a CR not followed by LF stays, for the error to name.
    if (!line.empty() && line.back() == '\n') {
      line.remove_suffix(1);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    }
    return true;
  }

  // Splits a CSV line into fields_ (RFC 4180 quoting), recording where each starts.
  void split(std::string_view line) {
    fields_.clear();
    starts_.clear();
    std::size_t used = 0;  // unquoted_ strings in use
    std::size_t i = 0;
    for (;;) {
      starts_.push_back(i);
      if (i < line.size() && line[i] == '"') {
        if (used == unquoted_.size()) unquoted_.emplace_back();
        std::string& s = unquoted_[used++];
        s.clear();
        std::size_t j = i + 1;
        for (;;) {
          if (j >= line.size()) {
            fail(static_cast<std::uint32_t>(i + 1), "", "unterminated quoted field");
          }
          if (line[j] == '"') {
            if (j + 1 < line.size() && line[j + 1] == '"') {
              s += '"';
              j += 2;
              continue;
            }
            ++j;
            break;
          }
          s += line[j++];
        }
        if (j < line.size() && line[j] != ',') {
          fail(static_cast<std::uint32_t>(j + 1), "",
               "unexpected character after a quoted field (expected ',')");
        }
        fields_.push_back(std::string_view());  // patched below: unquoted_ may still grow
        quoted_.emplace_back(fields_.size() - 1, used - 1);
        i = j;
      } else {
        const std::size_t end = std::min(line.find(',', i), line.size());
        fields_.push_back(line.substr(i, end - i));
        i = end;
      }
      if (i >= line.size()) break;
      ++i;  // the comma
    }
    for (const auto& [field, s] : quoted_) fields_[field] = unquoted_[s];
    quoted_.clear();
  }

  Ticks millis(std::string_view v, std::uint32_t col, const char* field) const {
    using Status = Millis::Status;
    const bool negative = !v.empty() && v.front() == '-';
    const Millis m = parse_millis(negative ? v.substr(1) : v);
    if (m.status == Status::not_a_number) {
      fail(col, field, "expected a number of milliseconds, got " + quote_for_error(v));
    }
    if (m.status == Status::not_finite) {
      fail(col, field, "expected a finite number of milliseconds, got " + quote_for_error(v));
    }
    // The text is a well-formed number from here on, but maybe a long one: cut.
    if (negative) fail(col, field, "must not be negative (got " + escape_for_error(v) + ")");
    if (m.status == Status::too_precise) {
      fail(col, field,
           "has more than 6 decimal places (got " + escape_for_error(v) +
               "): times are whole nanoseconds, at most 0.000001 ms apart");
    }
    if (m.status == Status::too_large) {
      fail(col, field,
           "is too large (got " + escape_for_error(v) +
               "; at most 4000000000000 ms, about 126 years)");
    }
    return m.ns;
  }

  void read_header() {
    std::string_view line;
    if (!read_line(line)) {
      throw InputError({name_, 1, 0}, "", "is empty: expected the header " + std::string(kHeader));
    }
    if (line.size() >= 3 && line.substr(0, 3) == "\xEF\xBB\xBF") line.remove_prefix(3);  // BOM
    if (line.find('\r') != std::string_view::npos) {
      // Lines that end in a bare CR are one long line to getline().
      fail(0, "",
           "the header line holds a carriage return (\\r): lines must end in LF or CRLF, "
           "not CR alone (got " +
               excerpt(line) + ")");
    }
    split(line);
    const auto known = [](std::string_view name) {
      return std::find(std::begin(kColumnNames), std::end(kColumnNames), name) !=
             std::end(kColumnNames);
    };
    if (std::none_of(fields_.begin(), fields_.end(), known)) {
      fail(0, "",
           "missing header: the first line must be the header " + std::string(kHeader) + " (got " +
               excerpt(line) + ")");
    }
    for (std::size_t i = 0; i < fields_.size(); ++i) {
      const std::string_view name = fields_[i];
      const auto* it = std::find(std::begin(kColumnNames), std::end(kColumnNames), name);
      if (it == std::end(kColumnNames)) {
        fail(column_of(i), escape_for_error(name),
             "unknown column " + quote_for_error(name) + " (the header is " + std::string(kHeader) +
                 ")");
      }
      const auto c = static_cast<Column>(it - std::begin(kColumnNames));
      if (std::find(order_.begin(), order_.end(), c) != order_.end()) {
        fail(column_of(i), escape_for_error(name), "appears twice in the header");
      }
      order_.push_back(c);
    }
    for (std::size_t c = 0; c < std::size(kColumnNames); ++c) {
      if (std::find(order_.begin(), order_.end(), static_cast<Column>(c)) == order_.end()) {
        fail(0, std::string(kColumnNames[c]),
             "missing column (the header must name t_ms, key, duration_ms and outcome; got " +
                 excerpt(line) + ")");
      }
    }
  }

  // getline()'s buffer, freed even when the constructor throws (a bad header).
  struct LineBuffer {
    char* data = nullptr;
    std::size_t capacity = 0;
    LineBuffer() = default;
    LineBuffer(const LineBuffer&) = delete;
    LineBuffer& operator=(const LineBuffer&) = delete;
    ~LineBuffer() { std::free(data); }
  };

  std::FILE* in_;
  std::string name_;
  std::FILE* copy_;
  std::uint64_t max_lines_;
  LineBuffer line_;
  std::uint64_t line_no_ = 0;
  std::vector<Column> order_;
  std::vector<std::string_view> fields_;
  std::vector<std::size_t> starts_;
  std::vector<std::string> unquoted_;
  std::vector<std::pair<std::size_t, std::size_t>> quoted_;
  Ticks last_t_ = 0;
  std::uint64_t last_line_ = 0;
};

// ---- output ----------------------------------------------------------------------

class Writer {
 public:
  explicit Writer(std::FILE* out) : out_(out) { buf_.reserve(kFlushAt + 4096); }
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;
  std::string& buffer() { return buf_; }
  void end_line() {
    buf_ += '\n';
    if (buf_.size() >= kFlushAt) flush();
  }
  void flush() {
    if (!buf_.empty() && std::fwrite(buf_.data(), 1, buf_.size(), out_) != buf_.size()) {
      throw std::runtime_error("cannot write the output");
    }
    buf_.clear();
    if (std::fflush(out_) != 0) throw std::runtime_error("cannot write the output");
  }

 private:
  static constexpr std::size_t kFlushAt = 1 << 16;
  std::FILE* out_;
  std::string buf_;
};

// ---- the replay ------------------------------------------------------------------

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};

template <class B>
class Replayer {
  using Permit = typename B::Permit;

 public:
  Replayer(const BreakerSpec& spec, Writer& out, const ReplayOptions& options)
      : policy_(spec.as<typename B::Config>(), clock_),
        out_(out),
        options_(options),
        slow_after_(spec.slow_call_duration().count()) {
    policy_.on_transition([this](const TransitionEvent& e) { transition(e); });
  }
  Replayer(const Replayer&) = delete;
  Replayer& operator=(const Replayer&) = delete;

  // What one key costs: its breaker (a count window keeps one byte per call of the
  // window, on the heap), its record, and the two maps' nodes (their names aside).
  static std::size_t bytes_per_key(const BreakerSpec& spec) {
    constexpr std::size_t kMapNode = 64;
    return sizeof(B) + sizeof(Key) + 2 * kMapNode +
           (spec.window() == WindowKind::count ? spec.as<CountWindowConfig>().window.size : 0);
  }

  void arrival(const Row& row) {
    complete_until(row.t);
    clock_.set(Nanos(row.t));
    const std::uint32_t k = key_index(row.key);
    Key& key = *keys_[k];
    auto permit = key.breaker->try_acquire();
    if (options_.decisions) decision(row.t, key, permit.has_value());
    if (!permit) return;
    std::uint32_t slot = 0;
    if (!free_.empty()) {
      slot = free_.back();
      free_.pop_back();
    } else {
      slot = static_cast<std::uint32_t>(slots_.size());
      slots_.emplace_back();
    }
    Slot& s = slots_[slot];
    s.permit.emplace(std::move(*permit));
    s.outcome = row.outcome;
    s.duration = row.duration;
    s.key = k;
    heap_.push_back({row.t + row.duration, seq_++, slot});
    std::push_heap(heap_.begin(), heap_.end(), Later{});
  }

  // Completes every call still in flight, then writes the summaries.
  void finish() {
    complete_until(kTicksMax);
    for (const auto& key : keys_) {
      const BreakerSnapshot snap = key->breaker->snapshot();
      std::string& b = out_.buffer();
      b += "{\"key\":";
      append_json_string(b, key->name);
      b += ",\"summary\":{\"permitted\":" + std::to_string(snap.permitted) +
           ",\"rejected\":" + std::to_string(snap.rejected) +
           ",\"success\":" + std::to_string(snap.successes) +
           ",\"failure\":" + std::to_string(snap.failures) +
           ",\"slow\":" + std::to_string(key->slow) +
           ",\"ignored\":" + std::to_string(snap.ignored) +
           ",\"opened\":" + std::to_string(snap.opens) + "}}";
      out_.end_line();
    }
  }

 private:
  struct Key {
    std::string name;
    std::unique_ptr<B> breaker;
    std::uint64_t slow = 0;
  };
  struct Slot {
    std::optional<Permit> permit;
    Outcome outcome = Outcome::success;
    Ticks duration = 0;
    std::uint32_t key = 0;
  };
  struct Pending {
    Ticks done;
    std::uint64_t seq;  // arrival order breaks ties
    std::uint32_t slot;
  };
  struct Later {
    bool operator()(const Pending& a, const Pending& b) const {
      return a.done != b.done ? a.done > b.done : a.seq > b.seq;
    }
  };

  std::uint32_t key_index(std::string_view name) {
    if (auto it = index_.find(name); it != index_.end()) return it->second;
    auto key = std::make_unique<Key>();
    key->name = std::string(name);
    key->breaker = std::make_unique<B>(policy_);
    by_breaker_.emplace(key->breaker.get(), static_cast<std::uint32_t>(keys_.size()));
    index_.emplace(key->name, static_cast<std::uint32_t>(keys_.size()));
    keys_.push_back(std::move(key));
    return static_cast<std::uint32_t>(keys_.size() - 1);
  }

  void complete_until(Ticks t) {
    while (!heap_.empty() && heap_.front().done <= t) {
      std::pop_heap(heap_.begin(), heap_.end(), Later{});
      const Pending p = heap_.back();
      heap_.pop_back();
      clock_.set(Nanos(p.done));
      Slot& s = slots_[p.slot];
      if (s.outcome != Outcome::ignored && slow_after_ > 0 && s.duration > slow_after_) {
        ++keys_[s.key]->slow;
      }
      s.permit->record(s.outcome, Nanos(s.duration));
      s.permit.reset();
      free_.push_back(p.slot);
    }
  }

  void transition(const TransitionEvent& e) {
    const auto it = by_breaker_.find(e.breaker);
    if (it == by_breaker_.end()) return;
    std::string& b = out_.buffer();
    b += "{\"t_ms\":";
    append_ms(b, e.at);
    b += ",\"key\":";
    append_json_string(b, keys_[it->second]->name);
    b += ",\"from\":\"";
    b += to_string(e.from);
    b += "\",\"to\":\"";
    b += to_string(e.to);
    b += "\",\"reason\":\"";
    b += to_string(e.reason);
    b += e.flapping ? "\",\"flapping\":true}" : "\"}";
    out_.end_line();
  }

  void decision(Ticks t, const Key& key, bool permitted) {
    std::string& b = out_.buffer();
    b += "{\"t_ms\":";
    append_ms(b, t);
    b += ",\"key\":";
    append_json_string(b, key.name);
    b += permitted ? ",\"decision\":\"permitted\"}" : ",\"decision\":\"rejected\"}";
    out_.end_line();
  }

  ManualClock clock_;
  typename B::Policy policy_;
  Writer& out_;
  ReplayOptions options_;
  const Ticks slow_after_;
  // Keys (and their breakers) outlive the permits in slots_, declared after them.
  std::vector<std::unique_ptr<Key>> keys_;
  std::unordered_map<std::string, std::uint32_t, StringHash, std::equal_to<>> index_;
  std::unordered_map<const void*, std::uint32_t> by_breaker_;
  std::vector<Slot> slots_;
  std::vector<std::uint32_t> free_;
  std::vector<Pending> heap_;
  std::uint64_t seq_ = 0;
};

// Counts the distinct keys of the checking pass (by hash: a collision only undercounts)
// and refuses the key past which their breakers would take more than kMaxKeyMemory.
class KeyBudget {
 public:
  KeyBudget(std::size_t bytes_per_key, std::string name)
      : per_key_(bytes_per_key), name_(std::move(name)) {}

  void add(const Row& row) {
    if (!seen_.insert(std::hash<std::string_view>{}(row.key)).second) return;
    // The breaker and its bookkeeping, and the name, kept twice (the key and its index).
    used_ += per_key_ + 2 * row.key.size();
    if (used_ <= kMaxKeyMemory) return;
    throw InputError(
        {name_, static_cast<std::uint32_t>(row.line), row.key_column}, "key",
        "is distinct key " + std::to_string(seen_.size()) +
            ": replay keeps every key's breaker until the end (for its summary), about " +
            std::to_string(per_key_) + " bytes each with this configuration, and holds at most " +
            std::to_string(kMaxKeyMemory >> 20) +
            " MiB of them; replay fewer keys at once (split the trace by key)");
  }

 private:
  std::size_t per_key_;
  std::string name_;
  std::unordered_set<std::uint64_t> seen_;
  std::size_t used_ = 0;
};

// True if `f` can be read again from the start.
bool rewindable(std::FILE* f) {
  const off_t pos = ftello(f);
  return pos != -1 && fseeko(f, pos, SEEK_SET) == 0;
}

struct FileCloser {
  void operator()(std::FILE* f) const noexcept {
    if (f != nullptr) std::fclose(f);
  }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

}  // namespace

void replay(const BreakerSpec& spec, std::FILE* in, const std::string& name, std::FILE* out,
            const ReplayOptions& options) {
  // Pass 1: check every row; copy an input that cannot be rewound.
  const off_t start = ftello(in);
  FilePtr spool;
  if (!rewindable(in)) {
    spool.reset(std::tmpfile());
    if (!spool)
      throw std::runtime_error("cannot create a temporary file to read " + name + " twice");
  }
  std::uint64_t lines = 0;
  {
    const std::size_t per_key = with_breaker_type(spec.window(), [&](auto type) {
      return Replayer<typename decltype(type)::type>::bytes_per_key(spec);
    });
    KeyBudget keys(per_key, name);
    TraceReader check(in, name, spool.get());
    Row row;
    while (check.next(row)) keys.add(row);
    lines = check.lines_read();
  }
  // Pass 2: replay.
  std::FILE* source = spool ? spool.get() : in;
  if ((spool && std::fflush(source) != 0) ||
      fseeko(source, spool ? 0 : std::max<off_t>(start, 0), SEEK_SET) != 0) {
    throw std::runtime_error("cannot read " + name + " a second time");
  }
  Writer writer(out);
  with_breaker_type(spec.window(), [&](auto type) {
    using B = typename decltype(type)::type;
    Replayer<B> replayer(spec, writer, options);
    TraceReader reader(source, name, nullptr, lines);
    Row row;
    while (reader.next(row)) replayer.arrival(row);
    replayer.finish();
  });
  writer.flush();
}

void replay_file(const BreakerSpec& spec, const std::string& path, std::FILE* out,
                 const ReplayOptions& options) {
  if (path == "-") return replay(spec, stdin, "<stdin>", out, options);
  FilePtr in(std::fopen(path.c_str(), "rb"));
  if (!in) throw InputError({path, 0, 0}, "", std::string("cannot open: ") + std::strerror(errno));
  replay(spec, in.get(), path, out, options);
}

std::string replay_text(const BreakerSpec& spec, std::string_view csv, const std::string& name,
                        const ReplayOptions& options) {
  std::string input(csv);
  FilePtr in(input.empty() ? std::tmpfile() : fmemopen(input.data(), input.size(), "r"));
  if (!in) throw std::runtime_error("fmemopen failed");
  char* data = nullptr;
  std::size_t size = 0;
  {
    FilePtr out(open_memstream(&data, &size));
    if (!out) throw std::runtime_error("open_memstream failed");
    try {
      replay(spec, in.get(), name, out.get(), options);
    } catch (...) {
      out.reset();
      std::free(data);
      throw;
    }
  }
  std::string result(data, size);
  std::free(data);
  return result;
}

}  // namespace bulwark::lab
