#include "bulwark/lab/replay.h"

#include <stdio.h>  // getline, fmemopen, open_memstream, fseeko (POSIX)
#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "breakers.h"
#include "bulwark/lab/input_error.h"

namespace bulwark::lab {
namespace {

constexpr std::size_t kMaxLine = 1 << 20;
// Times and durations up to ~126 years of milliseconds: their sum still fits in
// 64-bit nanoseconds.
constexpr double kMaxMillis = 4e12;

std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20) {
      out += '?';
    } else {
      out += c;
    }
  }
  return out + "\"";
}

bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;
    std::uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // truncated sequence
    for (std::size_t k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
        (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (char ch : s) {
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
        if (c < 0x20) {
          static const char kHex[] = "0123456789abcdef";
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 15];
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

// ---- reading the trace --------------------------------------------------------------

enum class Column : std::uint8_t { t_ms, key, duration_ms, outcome };
constexpr std::string_view kColumnNames[] = {"t_ms", "key", "duration_ms", "outcome"};
constexpr std::string_view kHeader = "t_ms,key,duration_ms,outcome";

struct Row {
  Ticks t = 0;
  std::string_view key;
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
          if (!valid_utf8(v)) fail(col, "key", "is not valid UTF-8");
          row.key = v;
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
                 "unknown outcome " + quoted(v) + " (expected success, failure or ignored)");
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
    if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
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
    double ms = 0;
    const char* end = v.data() + v.size();
    const auto [ptr, ec] = std::from_chars(v.data(), end, ms, std::chars_format::general);
    if (v.empty() || ec != std::errc() || ptr != end) {
      if (!v.empty() && v.front() == '-') {
        double negative = 0;
        const auto [p2, e2] =
            std::from_chars(v.data() + 1, end, negative, std::chars_format::general);
        if (e2 == std::errc() && p2 == end) {
          fail(col, field, "must not be negative (got " + std::string(v) + ")");
        }
      }
      fail(col, field, "expected a number of milliseconds, got " + quoted(v));
    }
    if (!std::isfinite(ms)) fail(col, field, "expected a finite number of milliseconds");
    if (ms < 0 || (ms == 0 && std::signbit(ms))) {
      fail(col, field, "must not be negative (got " + std::string(v) + ")");
    }
    if (ms > kMaxMillis) fail(col, field, "is too large (got " + std::string(v) + ")");
    return static_cast<Ticks>(std::llround(ms * 1e6));
  }

  void read_header() {
    std::string_view line;
    if (!read_line(line)) {
      throw InputError({name_, 1, 0}, "", "is empty: expected the header " + std::string(kHeader));
    }
    if (line.size() >= 3 && line.substr(0, 3) == "\xEF\xBB\xBF") line.remove_prefix(3);  // BOM
    split(line);
    for (std::size_t i = 0; i < fields_.size(); ++i) {
      const std::string_view name = fields_[i];
      const auto* it = std::find(std::begin(kColumnNames), std::end(kColumnNames), name);
      if (it == std::end(kColumnNames)) {
        fail(column_of(i), std::string(name),
             "unknown column " + quoted(name) + " (the header is " + std::string(kHeader) + ")");
      }
      const auto c = static_cast<Column>(it - std::begin(kColumnNames));
      if (std::find(order_.begin(), order_.end(), c) != order_.end()) {
        fail(column_of(i), std::string(name), "appears twice in the header");
      }
      order_.push_back(c);
    }
    for (std::size_t c = 0; c < std::size(kColumnNames); ++c) {
      if (std::find(order_.begin(), order_.end(), static_cast<Column>(c)) == order_.end()) {
        fail(0, std::string(kColumnNames[c]),
             "missing column (the header must name t_ms, key, duration_ms and outcome; got " +
                 quoted(line) + ")");
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
      : policy_(spec.config, clock_),
        out_(out),
        options_(options),
        slow_after_(spec.config.slow_call_duration.count()) {
    policy_.on_transition([this](const TransitionEvent& e) { transition(e); });
  }
  Replayer(const Replayer&) = delete;
  Replayer& operator=(const Replayer&) = delete;

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
    b += "\"}";
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
  BreakerPolicy<ManualClock> policy_;
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
    TraceReader check(in, name, spool.get());
    Row row;
    while (check.next(row)) {
    }
    lines = check.lines_read();
  }
  // Pass 2: replay.
  std::FILE* source = spool ? spool.get() : in;
  if ((spool && std::fflush(source) != 0) ||
      fseeko(source, spool ? 0 : std::max<off_t>(start, 0), SEEK_SET) != 0) {
    throw std::runtime_error("cannot read " + name + " a second time");
  }
  Writer writer(out);
  with_breaker_type(spec.window, [&](auto type) {
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
