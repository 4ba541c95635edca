// A call trace's rows, read and checked one at a time: what `bulwark replay` and
// `bulwark calibrate` both read. Internal to the lab (not installed).
//
//   TraceReader reader(file, "trace.csv");   // reads and checks the header
//   Row row;
//   while (reader.next(row)) use(row);       // throws InputError naming line and column
//
// A row's key is a view into the reader's buffer, valid until the next call to next().
// Allocation-free per row once its buffers have grown to the longest line.

#ifndef BULWARK_LAB_SRC_TRACE_READER_H_
#define BULWARK_LAB_SRC_TRACE_READER_H_

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bulwark/clock.h"
#include "bulwark/lab/input_error.h"
#include "bulwark/outcome.h"

namespace bulwark::lab::detail {

inline constexpr std::size_t kMaxLine = 1 << 20;
// A key names a breaker: a service, a host, an operation.
inline constexpr std::size_t kMaxKeyBytes = 1024;
// Times and durations up to 4e12 ms (~126 years, enough for Unix-epoch milliseconds):
// their sum still fits in 64-bit nanoseconds.
inline constexpr std::uint64_t kMaxNanos = 4'000'000'000'000'000'000;

inline bool valid_utf8(std::string_view s) {
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

inline bool equals_lower(std::string_view s, std::string_view lower) {
  if (s.size() != lower.size()) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i] >= 'A' && s[i] <= 'Z' ? static_cast<char>(s[i] - 'A' + 'a') : s[i];
    if (c != lower[i]) return false;
  }
  return true;
}

// [digits][.digits][(e|E)[+|-]digits], at least one mantissa digit; no sign, no spaces.
inline Millis parse_millis(std::string_view s) {
  using Status = Millis::Status;
  if (equals_lower(s, "inf") || equals_lower(s, "infinity") || equals_lower(s, "nan")) {
    return {Status::not_finite, 0};
  }
  const auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  {
    // The common form first: up to 13 integer digits, then up to 6 decimals.
    std::size_t i = 0;
    std::uint64_t ms = 0;
    while (i < s.size() && i < 13 && is_digit(s[i]))
      ms = ms * 10 + static_cast<unsigned>(s[i++] - '0');
    if (i > 0 && (i == s.size() || s[i] == '.')) {
      std::uint64_t frac = 0;
      std::size_t digits = 0;
      if (i < s.size()) {
        ++i;
        while (i < s.size() && digits < 6 && is_digit(s[i])) {
          frac = frac * 10 + static_cast<unsigned>(s[i++] - '0');
          ++digits;
        }
      }
      if (i == s.size()) {
        static constexpr std::uint64_t kScale[] = {1'000'000, 100'000, 10'000, 1'000, 100, 10, 1};
        const std::uint64_t ns = ms * 1'000'000 + frac * kScale[digits];
        if (ns > kMaxNanos) return {Status::too_large, 0};
        return {Status::ok, static_cast<Ticks>(ns)};
      }
    }
  }
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
// Nanoseconds as milliseconds: "120", "0.5", "1234.000001".
inline void append_ms(std::string& out, Ticks ns) {
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
inline std::string excerpt(std::string_view line) {
  constexpr std::size_t kMax = 80;
  if (line.size() <= kMax) return quote_for_error(line);
  std::size_t cut = kMax;
  while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) --cut;
  return quote_for_error(line.substr(0, cut)) + "...";
}

// ---- reading the trace --------------------------------------------------------------

enum class Column : std::uint8_t { t_ms, key, duration_ms, outcome };
inline constexpr std::string_view kColumnNames[] = {"t_ms", "key", "duration_ms", "outcome"};
inline constexpr std::string_view kHeader = "t_ms,key,duration_ms,outcome";

struct Row {
  Ticks t = 0;
  std::string_view key;
  std::uint32_t key_column = 0;
  Ticks duration = 0;
  Outcome outcome = Outcome::success;
  std::uint64_t line = 0;
  // The key is the one of the row next() returned before (false: maybe not).
  bool same_key = false;
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
    if (read_plain(line, row)) return true;
    last_key_size_ = 0;  // the next row's key is checked in full
    row.same_key = false;
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

  // The common row, read in one scan: no quote, no CR, plain decimals (up to 13
  // digits, up to 6 decimals), an ASCII key, a known outcome, in time order. Gives the
  // row next()'s general path would; false (row untouched) for anything else, which
  // the general path then reads or names the error in.
  bool read_plain(std::string_view line, Row& row) {
    const char* p = line.data();
    const char* const end = p + line.size();
    Ticks t = 0, duration = 0;
    std::string_view key;
    std::uint32_t key_column = 0;
    Outcome outcome = Outcome::success;
    bool new_key = false;
    const std::size_t n = order_.size();
    for (std::size_t i = 0; i < n; ++i) {
      const char* f = p;
      switch (order_[i]) {
        case Column::t_ms:
          if (!plain_millis(p, end, t)) return false;
          break;
        case Column::duration_ms:
          if (!plain_millis(p, end, duration)) return false;
          break;
        case Column::key:
          // The key of the row before (runs of one key are common): already checked.
          if (const std::size_t k = last_key_size_;
              k > 0 && static_cast<std::size_t>(end - p) >= k && (p + k == end || p[k] == ',') &&
              std::memcmp(p, last_key_, k) == 0) {
            p += k;
          } else {
            new_key = true;
            while (p != end && *p != ',') {
              const auto c = static_cast<unsigned char>(*p);
              if (c >= 0x80 || c == '"' || c == '\r') return false;
              ++p;
            }
            if (p == f || static_cast<std::size_t>(p - f) > kMaxKeyBytes) return false;
          }
          key = std::string_view(f, static_cast<std::size_t>(p - f));
          key_column = static_cast<std::uint32_t>(f - line.data() + 1);
          break;
        case Column::outcome: {
          // All three are 7 letters: one length test, then fixed-size comparisons.
          if (end - p < 7 || (end - p > 7 && p[7] != ',')) return false;
          const char* const e = p + 7;
          if (std::memcmp(p, "success", 7) == 0) {
            outcome = Outcome::success;
          } else if (std::memcmp(p, "failure", 7) == 0) {
            outcome = Outcome::failure;
          } else if (std::memcmp(p, "ignored", 7) == 0) {
            outcome = Outcome::ignored;
          } else {
            return false;
          }
          p = e;
          break;
        }
      }
      // A comma after every field but the last, which ends the line.
      if (i + 1 < n) {
        if (p == end || *p != ',') return false;
        ++p;
      } else if (p != end) {
        return false;
      }
    }
    if (t < last_t_) return false;
    if (new_key) {
      std::memcpy(last_key_, key.data(), key.size());
      last_key_size_ = key.size();
    }
    row.t = t;
    row.duration = duration;
    row.key = key;
    row.key_column = key_column;
    row.outcome = outcome;
    row.line = line_no_;
    row.same_key = !new_key;
    last_t_ = t;
    last_line_ = line_no_;
    return true;
  }

  // parse_millis's common form at p, up to the next comma or the end: true and p past
  // the number, or false for anything else.
  static bool plain_millis(const char*& p, const char* end, Ticks& ns) {
    const char* q = p;
    std::uint64_t ms = 0;
    const char* const int_end = q + std::min<std::ptrdiff_t>(end - q, 13);
    while (q != int_end && static_cast<unsigned char>(*q - '0') < 10) {
      ms = ms * 10 + static_cast<unsigned>(*q++ - '0');
    }
    if (q == p) return false;
    std::uint64_t frac = 0;
    std::size_t digits = 0;
    if (q != end && *q == '.') {
      ++q;
      while (q != end && digits < 6 && static_cast<unsigned char>(*q - '0') < 10) {
        frac = frac * 10 + static_cast<unsigned>(*q++ - '0');
        ++digits;
      }
    }
    if (q != end && *q != ',') return false;
    static constexpr std::uint64_t kScale[] = {1'000'000, 100'000, 10'000, 1'000, 100, 10, 1};
    const std::uint64_t v = ms * 1'000'000 + frac * kScale[digits];
    if (v > kMaxNanos) return false;
    ns = static_cast<Ticks>(v);
    p = q;
    return true;
  }

  // Reads blocks into buf_ and hands out lines from it (memchr for the LF): no copy
  // and no call per line. A block read is copied to `copy_` as it is read.
  bool read_line(std::string_view& line) {
    if (line_no_ >= max_lines_) return false;
    std::size_t n = 0;
    for (;;) {
      const char* b = buf_.get() + begin_;
      const std::size_t avail = end_ - begin_;
      if (const void* nl = std::memchr(b, '\n', std::min(avail, kMaxLine)); nl != nullptr) {
        n = static_cast<std::size_t>(static_cast<const char*>(nl) - b) + 1;
        break;
      }
      if (avail >= kMaxLine && (!eof_ || avail > kMaxLine)) {
        throw InputError({name_, static_cast<std::uint32_t>(line_no_ + 1), 0}, "",
                         "line is longer than 1 MiB");
      }
      if (eof_) {
        if (avail == 0) return false;
        n = avail;  // the last line, without a line end
        break;
      }
      fill();
    }
    ++line_no_;
    line = std::string_view(buf_.get() + begin_, n);
    begin_ += n;
    // LF or CRLF ends a line; a CR not followed by LF stays, for the error to name.
    if (!line.empty() && line.back() == '\n') {
      line.remove_suffix(1);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    }
    return true;
  }

  void fill() {
    if (begin_ > 0) {
      std::memmove(buf_.get(), buf_.get() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    errno = 0;
    const std::size_t got = std::fread(buf_.get() + end_, 1, kBufferBytes - end_, in_);
    if (got == 0) {
      if (std::ferror(in_)) {
        throw InputError({name_, static_cast<std::uint32_t>(line_no_ + 1), 0}, "",
                         std::string("cannot read: ") + std::strerror(errno));
      }
      eof_ = true;
      return;
    }
    if (copy_ != nullptr && std::fwrite(buf_.get() + end_, 1, got, copy_) != got) {
      throw std::runtime_error("cannot copy " + name_ + " to a temporary file");
    }
    end_ += got;
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

  std::FILE* in_;
  std::string name_;
  std::FILE* copy_;
  std::uint64_t max_lines_;
  static constexpr std::size_t kBufferBytes = kMaxLine + (1 << 16);
  std::unique_ptr<char[]> buf_{new char[kBufferBytes]};
  std::size_t begin_ = 0, end_ = 0;  // the unread bytes of buf_
  bool eof_ = false;
  std::uint64_t line_no_ = 0;
  std::vector<Column> order_;
  std::vector<std::string_view> fields_;
  std::vector<std::size_t> starts_;
  std::vector<std::string> unquoted_;
  std::vector<std::pair<std::size_t, std::size_t>> quoted_;
  Ticks last_t_ = 0;
  std::uint64_t last_line_ = 0;
  // The key of the row before, if read_plain() read it (else empty).
  char last_key_[kMaxKeyBytes] = {};
  std::size_t last_key_size_ = 0;
};

}  // namespace bulwark::lab::detail

#endif  // BULWARK_LAB_SRC_TRACE_READER_H_
