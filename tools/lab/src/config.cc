#include "bulwark/lab/config.h"

#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bulwark/backoff.h"
#include "bulwark/config/config.h"
#include "bulwark/detail/breaker_word.h"
#include "bulwark/lab/duration.h"
#include "bulwark/lab/input_error.h"

namespace bulwark::lab {
namespace {

std::string in_quotes(std::string_view s) { return quote_for_error(s); }

// The breaker's own limits (fields of its state word), named in the lab's errors.
constexpr std::uint32_t kBreakerCountMax = 65535;   // consecutive_failures, window.size, ...
constexpr std::uint32_t kBreakerSuccessMax = 8191;  // half_open.probes
static_assert(kBreakerCountMax == detail::Word::kCountMax);
static_assert(kBreakerSuccessMax == detail::Word::kSuccessMax);

std::string number_text(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

std::string type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "the string " + in_quotes(n.as_string()->get());
    case toml::node_type::integer:
      return "the integer " + std::to_string(n.as_integer()->get());
    case toml::node_type::floating_point:
      return "the number " + number_text(n.as_floating_point()->get());
    case toml::node_type::boolean:
      return n.as_boolean()->get() ? "true" : "false";
    case toml::node_type::date:
    case toml::node_type::time:
    case toml::node_type::date_time:
      return "a date/time";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// One TOML table being read. Every key asked for (present or not) is a known key;
// finish() reports the keys present that nobody asked for, which is how unknown keys
// are found without a separate list of names that could drift from the reader.
class Reader {
 public:
  Reader(const toml::table& table, std::string path, std::shared_ptr<const std::string> file)
      : table_(&table), path_(std::move(path)), file_(std::move(file)) {}

  const std::string& path() const { return path_; }
  // As shown in an error: escaped, and cut if it is long (keys come from the file).
  std::string key_path(std::string_view key) const {
    return path_.empty() ? escape_for_error(key) : path_ + "." + escape_for_error(key);
  }
  // "[breaker]", or "the top level".
  std::string table_name() const { return path_.empty() ? "the top level" : "[" + path_ + "]"; }

  // A node's own source when it has one (a value from an environment variable names
  // the variable), else this file.
  SourceLocation at(const toml::source_region& s) const {
    return {s.path && !s.path->empty() ? *s.path : *file_, s.begin.line, s.begin.column};
  }
  SourceLocation where(const toml::node& n) const { return at(n.source()); }
  SourceLocation where() const { return where(*table_); }
  const std::shared_ptr<const std::string>& file() const { return file_; }

  [[noreturn]] void fail(std::string_view key, std::string message) const {
    if (const toml::node* n = table_->get(key)) {
      throw InputError(where(*n), key_path(key), std::move(message));
    }
    throw InputError(where(), key_path(key), std::move(message));
  }
  [[noreturn]] void fail_here(std::string message) const {
    throw InputError(where(), path_, std::move(message));
  }

  const toml::node* get(std::string_view key) {
    known_.emplace_back(key);
    return table_->get(key);
  }

  // Where warnings go (deprecated keys): a list, or standard error when none is given.
  void set_warnings(std::vector<InputError>* sink) { warnings_ = sink; }
  std::vector<InputError>* warnings() const { return warnings_; }
  void warn(std::string_view key, std::string message) const {
    const toml::node* n = table_->get(key);
    InputError w(n != nullptr ? where(*n) : where(), key_path(key), std::move(message));
    if (warnings_ != nullptr) {
      warnings_->push_back(std::move(w));
    } else {
      std::cerr << "warning: " << w.what() << "\n";
    }
  }
  // A key still read under an old name: asked for (so not unknown), but a misspelling
  // close to it is pointed at `new_path`, its current name.
  void renamed(std::string_view old_key, std::string_view new_path) {
    renamed_.emplace_back(old_key, new_path);
  }
  bool has(std::string_view key) const { return table_->get(key) != nullptr; }

  std::optional<std::string> string(std::string_view key, std::size_t max = kMaxNameBytes) {
    const toml::node* n = get(key);
    if (n == nullptr) return std::nullopt;
    if (!n->is_string()) fail(key, "expected a string, got " + type_name(*n));
    const std::string& v = n->as_string()->get();
    if (v.size() > max) {
      fail(key, "must be at most " + std::to_string(max) + " bytes long (got " +
                    std::to_string(v.size()) + ")");
    }
    return v;
  }

  std::optional<bool> boolean(std::string_view key) {
    const toml::node* n = get(key);
    if (n == nullptr) return std::nullopt;
    if (!n->is_boolean()) fail(key, "expected true or false, got " + type_name(*n));
    return n->as_boolean()->get();
  }

  std::optional<double> number(std::string_view key) {
    const toml::node* n = get(key);
    if (n == nullptr) return std::nullopt;
    double v = 0;
    if (n->is_integer()) {
      v = static_cast<double>(n->as_integer()->get());
    } else if (n->is_floating_point()) {
      v = n->as_floating_point()->get();
    } else {
      fail(key, "expected a number, got " + type_name(*n));
    }
    if (!std::isfinite(v)) fail(key, "must be a finite number (got " + number_text(v) + ")");
    return v;
  }
  std::optional<double> number(std::string_view key, double max) {
    const auto v = number(key);
    if (v && *v > max) {
      fail(key, "must be at most " + number_text(max) + " (got " + number_text(*v) + ")");
    }
    return v;
  }

  std::optional<std::uint64_t> unsigned_integer(std::string_view key, std::uint64_t max) {
    const toml::node* n = get(key);
    if (n == nullptr) return std::nullopt;
    if (!n->is_integer()) {
      fail(key, "expected a whole number, got " + type_name(*n));
    }
    const std::int64_t v = n->as_integer()->get();
    if (v < 0) fail(key, "must not be negative (got " + std::to_string(v) + ")");
    if (static_cast<std::uint64_t>(v) > max) {
      fail(key, "must be at most " + std::to_string(max) + " (got " + std::to_string(v) + ")");
    }
    return static_cast<std::uint64_t>(v);
  }
  // A whole number in [0, max]: `max` is the real limit, not the type's.
  std::optional<std::uint32_t> count(std::string_view key, std::uint32_t max) {
    const auto v = unsigned_integer(key, max);
    if (!v) return std::nullopt;
    return static_cast<std::uint32_t>(*v);
  }

  std::optional<Nanos> duration(std::string_view key, Nanos max = kMaxConfigDuration) {
    const toml::node* n = get(key);
    if (n == nullptr) return std::nullopt;
    if (!n->is_string()) {
      std::string hint;
      if (n->is_integer() || n->is_floating_point()) {
        const std::string v = n->is_integer() ? std::to_string(n->as_integer()->get())
                                              : number_text(n->as_floating_point()->get());
        hint = "; a bare number has no unit: write e.g. " + in_quotes(v + "s") + " or " +
               in_quotes(v + "ms");
      }
      fail(key,
           "expected a duration string such as \"800ms\" or \"30s\", got " + type_name(*n) + hint);
    }
    auto d = parse_duration(n->as_string()->get());
    if (!d) fail(key, d.error());
    if (*d > max) {
      fail(key, "must be at most " + format_duration(max) + " (got " + format_duration(*d) + ")");
    }
    return *d;
  }

  // One of `choices`, or an error listing them.
  std::optional<std::string> choice(std::string_view key,
                                    std::initializer_list<std::string_view> choices) {
    auto v = string(key);
    if (!v) return std::nullopt;
    for (std::string_view c : choices) {
      if (*v == c) return v;
    }
    std::string list;
    for (std::string_view c : choices) list += (list.empty() ? "" : ", ") + in_quotes(c);
    fail(key, "must be one of " + list + " (got " + in_quotes(*v) + ")");
  }

  std::optional<Reader> table(std::string_view key) {
    const toml::node* n = get(key);
    if (n == nullptr) return std::nullopt;
    if (!n->is_table()) fail(key, "expected a table, got " + type_name(*n));
    Reader sub(*n->as_table(), key_path(key), file_);
    sub.set_warnings(warnings_);
    return sub;
  }

  const toml::array* array(std::string_view key) {
    const toml::node* n = get(key);
    if (n == nullptr) return nullptr;
    if (!n->is_array()) fail(key, "expected an array, got " + type_name(*n));
    return n->as_array();
  }

  template <class T>
  T required(std::optional<T> v, std::string_view key) const {
    if (!v) fail_here("missing required key " + in_quotes(key) + " in " + table_name());
    return std::move(*v);
  }

  // Reports the first key (in file order) that no getter asked for.
  void finish(std::string_view hint = {}) const {
    const toml::node* first = nullptr;
    std::string first_key;
    for (auto&& [k, v] : *table_) {
      if (std::find(known_.begin(), known_.end(), k.str()) != known_.end()) continue;
      const auto& src = k.source();
      if (first == nullptr || src.begin.line < first->source().begin.line ||
          (src.begin.line == first->source().begin.line &&
           src.begin.column < first->source().begin.column)) {
        first = &v;
        first_key = std::string(k.str());
      }
    }
    if (first == nullptr) return;
    std::string message = "unknown key " + in_quotes(first_key) + " in " + table_name();
    // Suggest only close matches: one edit per four characters ("mean" is not "max").
    std::string best;
    std::size_t best_d = std::max<std::size_t>(1, first_key.size() / 4) + 1;
    for (const std::string& k : known_) {
      // The distance is at least the difference in length, so a key much longer than
      // every known one (a 500 KB key) is compared with none: the search costs what it
      // costs for a key of the known keys' length.
      const std::size_t gap =
          first_key.size() > k.size() ? first_key.size() - k.size() : k.size() - first_key.size();
      if (gap >= best_d) continue;
      const std::size_t d = edit_distance(first_key, k);
      if (d < best_d) best_d = d, best = k;
    }
    for (const auto& [old_key, new_path] : renamed_) {
      if (best == old_key) best = new_path;
    }
    if (!best.empty()) {
      message += " (did you mean " + in_quotes(best) + "?)";
    } else if (!hint.empty()) {
      message += " (" + std::string(hint) + ")";
    }
    // The key's own position, not its value's: that is what is misspelt.
    for (auto&& [k, v] : *table_) {
      if (k.str() == first_key) {
        // A key set from the environment has no position of its own: its value's.
        throw InputError(at(k.source().path ? k.source() : v.source()), key_path(first_key),
                         std::move(message));
      }
    }
    throw InputError(where(*first), key_path(first_key), std::move(message));
  }

  // Maps a library ConfigError (whose field may be dotted: "backoff.initial") to the key
  // and line it came from, or to this table when the key is not written.
  [[noreturn]] void fail_config(const ConfigError& e) const {
    const toml::table* t = table_;
    const toml::node* n = nullptr;
    std::string_view rest = e.field;
    while (t != nullptr && !rest.empty()) {
      const std::size_t dot = rest.find('.');
      n = t->get(rest.substr(0, dot));
      if (n == nullptr || dot == std::string_view::npos) break;
      rest = rest.substr(dot + 1);
      t = n->as_table();
    }
    if (n != nullptr) throw InputError(where(*n), key_path(e.field), e.message);
    throw InputError(where(), key_path(e.field), e.message);
  }

 private:
  const toml::table* table_;
  std::string path_;
  std::shared_ptr<const std::string> file_;
  std::vector<std::string> known_;
  std::vector<std::pair<std::string, std::string>> renamed_;
  std::vector<InputError>* warnings_ = nullptr;
};

// toml++ recurses once per level of nesting, and its own limit covers arrays and inline
// tables only: 40,000 dotted-key or table-header levels in an 80 KB file overflow the
// stack. So the text's shape is checked before it is parsed: its size, and how deep any
// key path, header, array or inline table goes. A lexical scan: strings and comments
// are skipped, a dot between key parts adds a level, an open bracket or brace adds one
// until it closes; a header's levels count under every key of its table. It may count
// a level too many (a number's decimal point), never one too few.
void check_toml_shape(std::string_view text, const std::string& source_name) {
  if (text.size() > kMaxTomlBytes) {
    throw InputError({source_name, 0, 0}, "",
                     "is larger than " + std::to_string(kMaxTomlBytes >> 20) +
                         " MiB, the most a configuration file may hold");
  }
  std::uint32_t line = 1, column = 0;
  std::uint32_t open = 0;         // brackets and braces not yet closed
  std::uint32_t dots = 0;         // dots in the key path being read
  std::uint32_t header = 0;       // levels of the current table's header
  std::uint32_t header_dots = 0;  // dots of the header being read
  bool in_header = false, after_equals = false;
  const auto is_key_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == ' ' || c == '\t';
  };
  const auto check = [&](std::uint32_t depth) {
    if (depth > kMaxTomlNesting) {
      throw InputError({source_name, line, column}, "",
                       "nests keys, tables or values more than " + std::to_string(kMaxTomlNesting) +
                           " levels deep (a configuration needs at most 6)");
    }
  };
  // Skips to just past `close` (a string's end; escapes in basic strings), counting lines.
  const auto skip_string = [&](std::size_t& i, std::string_view close, bool escapes) {
    for (; i < text.size(); ++i) {
      const char c = text[i];
      if (c == '\n') ++line, column = 0;
      ++column;
      if (escapes && c == '\\') {
        ++i, ++column;
        if (i < text.size() && text[i] == '\n') ++line, column = 1;
        continue;
      }
      if (close.size() == 1 && c == '\n') return;  // unterminated: toml++ says so
      if (text.substr(i, close.size()) == close) {
        i += close.size() - 1;
        return;
      }
    }
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    ++column;
    if (c == '\n') {
      ++line, column = 0;
      if (open == 0) after_equals = false, in_header = false;
      dots = 0;
      continue;
    }
    if (c == '#') {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
      continue;
    }
    if (c == '"' || c == '\'') {
      const bool multi = text.substr(i, 3) == std::string_view(c == '"' ? "\"\"\"" : "'''");
      i += multi ? 3 : 1;
      column += multi ? 2 : 0;
      skip_string(i, multi ? text.substr(i - 3, 3) : text.substr(i - 1, 1), c == '"');
      continue;  // a quoted key part keeps the path going
    }
    if (c == '.') {
      ++dots;
      if (in_header) ++header_dots;
      check((in_header ? 0 : header) + open + dots + 1);
      continue;
    }
    if (is_key_char(c)) continue;
    dots = 0;  // anything else ends a key path
    if (c == '=' && open == 0) after_equals = true;
    if (c == '[' || c == '{') {
      if (c == '[' && open == 0 && !after_equals) in_header = true, header_dots = 0;
      ++open;
      check((in_header ? 0 : header) + open);
    } else if ((c == ']' || c == '}') && open > 0) {
      --open;
      if (in_header && open == 0) header = header_dots + 1;
    }
  }
}

toml::table parse_toml(std::string_view text, const std::string& source_name) {
  check_toml_shape(text, source_name);
  try {
    return toml::parse(text, std::string_view(source_name));
  } catch (const toml::parse_error& e) {
    // toml++'s description may quote the input: shown printable, and cut.
    std::string_view description = e.description();
    std::string suffix;
    if (description.size() > 4 * kMaxEchoed) {
      std::size_t cut = 4 * kMaxEchoed;
      while (cut > 0 && (static_cast<unsigned char>(description[cut]) & 0xC0) == 0x80) --cut;
      description = description.substr(0, cut);
      suffix = "...";
    }
    throw InputError({source_name, e.source().begin.line, e.source().begin.column}, "",
                     "not valid TOML: " + printable(description) + suffix);
  }
}

// The file's text; "-" is standard input. Reads at most one byte more than a file may
// hold, so a huge file (or an endless pipe) is refused without being read whole.
std::string read_file(const std::string& path) {
  std::string text;
  const auto read_from = [&](std::istream& in) {
    char buf[1 << 16];
    while (text.size() <= kMaxTomlBytes && in.read(buf, sizeof buf).gcount() > 0) {
      text.append(buf, static_cast<std::size_t>(in.gcount()));
    }
  };
  if (path == "-") {
    read_from(std::cin);
    if (std::cin.bad()) throw InputError({"<stdin>", 0, 0}, "", "cannot read standard input");
    return text;
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw InputError({path, 0, 0}, "", "is a directory, not a TOML file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError({path, 0, 0}, "", "cannot open the file");
  read_from(in);
  if (in.bad()) throw InputError({path, 0, 0}, "", "cannot read the file");
  return text;
}

// ---- breaker ---------------------------------------------------------------------

// A breaker table's keys are the field paths of the breaker's configuration
// (BreakerConfig, CountWindowConfig, TimeWindowConfig): `half_open.probes`, as a dotted
// key or in a [breaker.half_open] table. Earlier releases wrote one flat key per nested
// field; those names are still read, with a warning naming the new key.
constexpr std::pair<std::string_view, std::string_view> kBreakerKeys[] = {
    {"window.size", "window_size"},
    {"window.length", "window_length"},
    {"window.buckets", "window_buckets"},
    {"open_growth.multiplier", "open_duration_multiplier"},
    {"open_growth.max", "max_open_duration"},
    {"half_open.probes", "half_open_successes"},
    {"half_open.max_in_flight", "half_open_max_calls"},
    {"half_open.fraction", "half_open_fraction"},
    {"half_open.ramp", "half_open_ramp"},
    {"half_open.max_wait", "half_open_max_wait"},
    {"half_open.random_seed", "random_seed"},
};

std::string_view old_key_of(std::string_view path) {
  for (const auto& [p, key] : kBreakerKeys) {
    if (p == path) return key;
  }
  return {};
}

WindowKind kind_of(std::string_view v) {
  return v == "count" ? WindowKind::count : v == "time" ? WindowKind::time : WindowKind::none;
}

// The breaker's nested tables, and which of its fields were given under an old name.
struct BreakerTables {
  Reader& top;
  std::optional<Reader> window, open_growth, half_open;

  std::optional<Reader>& sub(std::string_view table) {
    return table == "window" ? window : table == "open_growth" ? open_growth : half_open;
  }
  // The reader and key that hold the field at `path` ("half_open.probes"): its table, or
  // its deprecated flat key (with a warning). Both at once is an error.
  std::pair<Reader*, std::string> locate(std::string_view path) {
    const std::size_t dot = path.find('.');
    const std::string_view table = path.substr(0, dot), leaf = path.substr(dot + 1);
    const std::string_view old = old_key_of(path);
    std::optional<Reader>& t = sub(table);
    top.renamed(old, path);
    if (top.has(old)) {
      if (t && t->has(leaf)) {
        top.fail(old, "sets " + std::string(path) + " a second time: keep " + in_quotes(path) +
                          " (the old name " + in_quotes(old) + " is deprecated)");
      }
      top.warn(old, "the key " + in_quotes(old) + " is deprecated and will be removed: write " +
                        in_quotes(path));
      return {&top, std::string(old)};
    }
    if (t) return {&*t, std::string(leaf)};
    return {&top, std::string(old)};  // absent either way
  }
  bool has(std::string_view path) {
    auto [r, key] = locate_quiet(path);
    return r->has(key);
  }
  [[noreturn]] void fail(std::string_view path, std::string message) {
    auto [r, key] = locate_quiet(path);
    r->fail(key, std::move(message));
  }

 private:
  std::pair<Reader*, std::string> locate_quiet(std::string_view path) {
    if (path.find('.') == std::string_view::npos) return {&top, std::string(path)};
    const std::size_t dot = path.find('.');
    std::optional<Reader>& t = sub(path.substr(0, dot));
    if (t && t->has(path.substr(dot + 1))) return {&*t, std::string(path.substr(dot + 1))};
    return {&top, std::string(old_key_of(path))};
  }
};

BreakerSpec read_breaker(Reader& r) {
  const std::optional<std::string> name = r.string("name");
  BreakerTables t{r, {}, {}, {}};
  // The breaker type: `kind`. Earlier releases wrote it as `window = "count"`, which
  // is now the window's own table.
  std::optional<std::string> kind = r.choice("kind", {"consecutive", "count", "time"});
  if (const toml::node* w = r.get("window"); w != nullptr && w->is_string()) {
    auto old = r.choice("window", {"none", "count", "time"});
    if (kind) {
      r.fail("window", "gives the breaker type a second time: keep kind = " + in_quotes(*kind));
    }
    const std::string now = *old == "none" ? "consecutive" : *old;
    r.warn("window", "window = " + in_quotes(*old) +
                         " is deprecated and will be removed: write kind = " + in_quotes(now));
    kind = now;
  } else if (w != nullptr) {
    t.window = r.table("window");
  }
  t.open_growth = r.table("open_growth");
  t.half_open = r.table("half_open");
  const WindowKind window = kind ? kind_of(*kind) : WindowKind::none;

  const auto count = [&](std::string_view path, std::uint32_t max) {
    auto [rd, key] = t.locate(path);
    return rd->count(key, max);
  };
  const auto duration = [&](std::string_view path) {
    auto [rd, key] = t.locate(path);
    return rd->duration(key);
  };
  const auto consecutive_failures = r.count("consecutive_failures", kBreakerCountMax);
  const auto failure_rate = r.number("failure_rate");
  const auto slow_call_rate = r.number("slow_call_rate");
  const auto slow_call_duration = r.duration("slow_call_duration");
  const auto minimum_calls = r.count("minimum_calls", kMaxMinimumCalls);
  const auto window_size = count("window.size", kBreakerCountMax);
  const auto window_length = duration("window.length");
  const auto window_buckets = count("window.buckets", kTimeWindowCapacity);
  const auto count_in_flight = r.boolean("count_in_flight_slow_calls");
  const auto open_duration = r.duration("open_duration");
  OpenGrowth growth;
  {
    auto [rd, key] = t.locate("open_growth.multiplier");
    if (auto v = rd->number(key, kMaxMultiplier)) growth.multiplier = *v;
  }
  if (auto v = duration("open_growth.max")) growth.max = *v;
  HalfOpen half_open;
  if (auto v = count("half_open.max_in_flight", kBreakerCountMax)) half_open.max_in_flight = *v;
  if (auto v = count("half_open.probes", kBreakerSuccessMax)) half_open.probes = *v;
  {
    auto [rd, key] = t.locate("half_open.fraction");
    if (auto v = rd->number(key)) half_open.fraction = *v;
  }
  {
    auto [rd, key] = t.locate("half_open.ramp");
    if (const toml::array* ramp = rd->array(key)) {
      for (std::size_t i = 0; i < ramp->size(); ++i) {
        const toml::node& n = *ramp->get(i);
        if (!n.is_number()) {
          throw InputError(
              rd->where(n), rd->key_path(key),
              "stage " + std::to_string(i + 1) + ": expected a number, got " + type_name(n));
        }
        half_open.ramp.push_back(n.value<double>().value_or(0.0));
      }
    }
  }
  if (auto v = duration("half_open.max_wait")) half_open.max_wait = *v;
  const auto flapping_period = r.duration("flapping_period");
  {
    auto [rd, key] = t.locate("half_open.random_seed");
    if (auto v = rd->unsigned_integer(key, std::numeric_limits<std::int64_t>::max())) {
      half_open.random_seed = *v;
    }
  }
  for (auto* sub : {&t.window, &t.open_growth, &t.half_open}) {
    if (*sub) (*sub)->finish();
  }
  r.finish();

  // Keys that this breaker type does not have are mistakes, not no-ops.
  const std::string this_kind =
      "this breaker has kind = " + in_quotes(kind.value_or("consecutive"));
  auto only_for = [&](std::string_view path, std::string_view kinds) {
    if (t.has(path)) {
      t.fail(path, "only applies to kind = " + std::string(kinds) + " (" + this_kind + ")");
    }
  };
  if (window != WindowKind::count) only_for("window.size", "\"count\"");
  if (window != WindowKind::time) {
    only_for("window.length", "\"time\"");
    only_for("window.buckets", "\"time\"");
  }
  if (window == WindowKind::none) {
    only_for("minimum_calls", "\"count\" or \"time\" (it is the rate rules' minimum volume)");
    only_for("count_in_flight_slow_calls", "\"count\" or \"time\"");
    for (std::string_view key : {"failure_rate", "slow_call_rate", "slow_call_duration"}) {
      if (r.has(key)) {
        r.fail(key,
               "needs a sliding window: set kind = \"count\" (the last window.size calls) "
               "or kind = \"time\" (the last window.length) in " +
                   r.table_name());
      }
    }
  }

  // The fields every breaker type has, then the rate fields of the windowed ones.
  auto common = [&](auto& c) {
    if (name) c.name = *name;
    if (consecutive_failures) c.consecutive_failures = *consecutive_failures;
    if (open_duration) c.open_duration = *open_duration;
    c.open_growth = growth;
    c.half_open = half_open;
    if (flapping_period) c.flapping_period = *flapping_period;
  };
  auto rates = [&](auto& c) {
    common(c);
    if (minimum_calls) c.minimum_calls = *minimum_calls;
    if (failure_rate) c.failure_rate = *failure_rate;
    if (slow_call_rate) c.slow_call_rate = *slow_call_rate;
    if (slow_call_duration) c.slow_call_duration = *slow_call_duration;
    if (count_in_flight) c.count_in_flight_slow_calls = *count_in_flight;
  };
  auto checked = [&](const auto& c, auto&&... capacity) -> BreakerSpec {
    if (auto ok = validate(c, capacity...); !ok) {
      // A field given under its old name is reported there.
      const std::string_view old = old_key_of(ok.error().field);
      if (!old.empty() && r.has(old)) r.fail(old, ok.error().message);
      r.fail_config(ok.error());
    }
    return BreakerSpec(c);
  };
  switch (window) {
    case WindowKind::count: {
      CountWindowConfig c;
      rates(c);
      if (window_size) c.window.size = *window_size;
      return checked(c);
    }
    case WindowKind::time: {
      TimeWindowConfig c;
      rates(c);
      if (window_length) c.window.length = *window_length;
      if (window_buckets) c.window.buckets = *window_buckets;
      return checked(c, kTimeWindowCapacity);
    }
    case WindowKind::none:
      break;
  }
  BreakerConfig c;
  common(c);
  return checked(c);
}

// ---- retry, budget, bulkhead, fallback --------------------------------------------

Backoff read_backoff(Reader& r) {
  const std::string kind = r.required(r.choice("kind", {"exponential", "constant"}), "kind");
  std::optional<Nanos> delay, initial, max;
  std::optional<double> multiplier;
  if (kind == "constant") {
    delay = r.duration("delay");
  } else {
    initial = r.duration("initial");
    multiplier = r.number("multiplier", kMaxMultiplier);
    max = r.duration("max");
  }
  const auto jitter = r.choice("jitter", {"none", "full", "equal", "decorrelated"});
  r.finish(kind == "constant" ? "kind = \"constant\" takes delay and jitter"
                              : "kind = \"exponential\" takes initial, multiplier, max and jitter");
  // Unset fields take the values of RetryConfig's default backoff (exponential 100 ms
  // x 2 up to 10 s, full jitter); a constant backoff has no default delay.
  const Backoff defaults = RetryConfig{}.backoff;
  Backoff b = kind == "constant" ? Backoff::constant(r.required(delay, "delay"))
                                 : Backoff::exponential(initial.value_or(defaults.initial()),
                                                        multiplier.value_or(defaults.multiplier()),
                                                        max.value_or(defaults.max()));
  Jitter j = defaults.jitter();
  if (jitter) {
    j = *jitter == "none"    ? Jitter::none
        : *jitter == "full"  ? Jitter::full
        : *jitter == "equal" ? Jitter::equal
                             : Jitter::decorrelated;
  }
  return b.with_jitter(j);
}

RetrySpec read_retry(Reader& r) {
  RetrySpec spec;
  RetryConfig& c = spec.config;
  if (auto v = r.string("name")) c.name = *v;
  if (auto v = r.count("max_attempts", kMaxAttempts)) c.max_attempts = *v;
  if (auto v = r.boolean("honor_retry_after")) c.honor_retry_after = *v;
  if (auto v = r.unsigned_integer("random_seed", std::numeric_limits<std::int64_t>::max())) {
    spec.random_seed = *v;
  }
  if (auto b = r.table("backoff")) c.backoff = read_backoff(*b);
  r.finish();
  if (auto ok = validate(c); !ok) r.fail_config(ok.error());
  // Seeded, so a simulation is reproducible. One generator per policy: the simulator
  // is single-threaded.
  auto rng = std::make_shared<SplitMix64>(spec.random_seed);
  c.random = [rng] { return (*rng)(); };
  return spec;
}

RetryBudgetConfig read_retry_budget(Reader& r) {
  RetryBudgetConfig c;
  if (auto v = r.string("name")) c.name = *v;
  if (auto v = r.number("ratio")) c.ratio = *v;
  if (auto v = r.number("min_retries_per_second")) c.min_retries_per_second = *v;
  if (auto v = r.number("max_tokens")) c.max_tokens = *v;
  r.finish();
  if (auto ok = validate(c); !ok) r.fail_config(ok.error());
  return c;
}

BulkheadConfig read_bulkhead(Reader& r) {
  BulkheadConfig c;
  if (auto v = r.string("name")) c.name = *v;
  if (auto v = r.count("max_concurrent", kMaxConcurrent)) c.max_concurrent = *v;
  if (auto v = r.duration("max_wait")) c.max_wait = *v;
  if (auto v = r.count("stripes", kMaxBulkheadStripes)) c.stripes = *v;
  r.finish();
  if (auto ok = validate(c); !ok) r.fail_config(ok.error());
  return c;
}

constexpr Reason kAllReasons[] = {
    Reason::breaker_open,      Reason::breaker_half_open_full, Reason::breaker_forced_open,
    Reason::bulkhead_full,     Reason::deadline_exceeded,      Reason::cancelled,
    Reason::retries_exhausted, Reason::budget_exhausted,       Reason::timeout,
    Reason::call_error,        Reason::rate_limited,           Reason::throttled};

// `on` is a set written as a list: every entry must add something. An empty list would
// make a fallback that answers nothing, and an entry given twice (or inside a group given
// too: "timeout" with "all") is a mistake, not a second vote; both are refused, naming
// the key.
Reasons read_fallback(Reader& r) {
  Reasons on = Reasons::all();
  if (const toml::array* list = r.array("on")) {
    if (list->empty()) {
      r.fail("on",
             "names no reason: a fallback that answers nothing is no fallback; name at least "
             "one, or leave `on` out for every failure (\"all\", the default)");
    }
    on = Reasons::none();
    std::vector<std::pair<std::string, Reasons>> given;
    for (std::size_t i = 0; i < list->size(); ++i) {
      const toml::node& n = *list->get(i);
      const auto name = n.value<std::string>();
      std::optional<Reasons> entry;
      if (name == "all") {
        entry = Reasons::all();
      } else if (name == "breaker") {
        entry = Reasons::breaker();
      } else if (name) {
        for (Reason reason : kAllReasons) {
          if (*name == to_string(reason)) entry = Reasons::none() | reason;
        }
      }
      if (!entry) {
        std::string names = "\"all\", \"breaker\"";
        for (Reason reason : kAllReasons) names += ", " + in_quotes(to_string(reason));
        throw InputError(r.where(n), r.key_path("on"),
                         "unknown reason " + (name ? in_quotes(*name) : type_name(n)) +
                             " (reasons are " + names + ")");
      }
      for (const auto& [other, reasons] : given) {
        const bool same = other == *name;
        const bool inside = entry->except(reasons) == Reasons::none();  // already covered
        const bool covers = reasons.except(*entry) == Reasons::none();  // covers an earlier one
        if (same || inside || covers) {
          throw InputError(r.where(n), r.key_path("on"),
                           same     ? "names " + in_quotes(*name) + " twice"
                           : inside ? "names " + in_quotes(*name) + ", which " + in_quotes(other) +
                                          " (given before it) already covers"
                                    : "names " + in_quotes(*name) + ", which covers " +
                                          in_quotes(other) + " (given before it): keep one");
        }
      }
      given.emplace_back(*name, *entry);
      on = on | *entry;
    }
  }
  r.finish();
  return on;
}

// [config.NAME.adaptive_limit]: the library's AdaptiveLimitConfig, by its field names.
AdaptiveLimitConfig read_adaptive_limit(Reader& r) {
  AdaptiveLimitConfig c;
  if (auto v = r.string("name")) c.name = *v;
  if (auto v = r.choice("algorithm", {"aimd", "vegas", "gradient2"})) {
    c.algorithm = *v == "aimd"    ? AdaptiveAlgorithm::aimd
                  : *v == "vegas" ? AdaptiveAlgorithm::vegas
                                  : AdaptiveAlgorithm::gradient2;
  }
  if (auto v = r.count("min_limit", kMaxConcurrent)) c.min_limit = *v;
  if (auto v = r.count("max_limit", kMaxConcurrent)) c.max_limit = *v;
  if (auto v = r.count("initial_limit", kMaxConcurrent)) c.initial_limit = *v;
  if (auto v = r.count("window_samples", kMaxConcurrent)) c.window_samples = *v;
  if (auto v = r.duration("min_window")) c.min_window = *v;
  if (auto t = r.table("aimd")) {
    if (auto v = t->number("backoff_ratio")) c.aimd.backoff_ratio = *v;
    if (auto v = t->number("increase")) c.aimd.increase = *v;
    if (auto v = t->duration("timeout")) c.aimd.timeout = *v;
    t->finish();
  }
  if (auto t = r.table("gradient2")) {
    if (auto v = t->number("tolerance")) c.gradient2.tolerance = *v;
    if (auto v = t->count("long_window", kMaxConcurrent)) c.gradient2.long_window = *v;
    if (auto v = t->number("queue_size")) c.gradient2.queue_size = *v;
    if (auto v = t->number("smoothing")) c.gradient2.smoothing = *v;
    t->finish();
  }
  r.finish();
  if (auto ok = validate(c); !ok) r.fail_config(ok.error());
  return c;
}

// [config.NAME.throttle]: the library's ThrottleConfig, by its field names; seeded (1
// unless given) so a simulation is reproducible.
ThrottleConfig read_throttle(Reader& r) {
  ThrottleConfig c;
  if (auto v = r.string("name")) c.name = *v;
  if (auto v = r.number("k")) c.k = *v;
  if (auto v = r.duration("window")) c.window = *v;
  if (auto v = r.count("buckets", 256)) c.buckets = *v;
  c.seed = r.unsigned_integer("seed", std::numeric_limits<std::int64_t>::max()).value_or(1);
  r.finish();
  if (auto ok = validate(c); !ok) r.fail_config(ok.error());
  return c;
}

// [config.NAME.shedder]: the library's LoadShedderConfig, by its field names, and its
// limit: `limit` (a FixedLimit) or an [adaptive_limit] table (an AdaptiveLimitSource;
// queue_timeout_is_drop as its constructor's argument).
ShedderSpec read_shedder(Reader& r) {
  ShedderSpec s;
  LoadShedderConfig& c = s.config;
  if (auto v = r.string("name")) c.name = *v;
  if (auto v = r.number("normal_share")) c.normal_share = *v;
  if (auto v = r.number("sheddable_share")) c.sheddable_share = *v;
  if (auto v = r.count("max_queue", kMaxServerQueue)) c.max_queue = *v;
  if (auto v = r.duration("target_delay")) c.target_delay = *v;
  if (auto v = r.duration("interval")) c.interval = *v;
  if (auto v = r.duration("initial_service_time", kMaxCallDuration)) c.initial_service_time = *v;
  if (auto v = r.number("service_time_weight")) c.service_time_weight = *v;
  if (auto v = r.duration("min_retry_after")) c.min_retry_after = *v;
  if (auto v = r.duration("max_retry_after")) c.max_retry_after = *v;
  if (auto v = r.boolean("coarse_timing")) c.coarse_timing = *v;
  if (auto v = r.count("http_status", 999)) c.http_status = static_cast<int>(*v);
  if (auto v = r.count("limit", kMaxConcurrent)) {
    if (*v < 1) r.fail("limit", "must be at least 1 (got 0)");
    s.limit = *v;
  }
  if (auto v = r.boolean("queue_timeout_is_drop")) s.queue_timeout_is_drop = *v;
  if (auto t = r.table("adaptive_limit")) s.adaptive_limit = read_adaptive_limit(*t);
  r.finish();
  if (r.has("limit") && s.adaptive_limit) {
    r.fail("limit", "contradicts [" + r.key_path("adaptive_limit") + "]: give one of them");
  }
  if (r.has("queue_timeout_is_drop") && !s.adaptive_limit) {
    r.fail("queue_timeout_is_drop", "needs a [" + r.key_path("adaptive_limit") + "] table");
  }
  if (auto ok = validate(c); !ok) r.fail_config(ok.error());
  return s;
}

// [config.NAME.goal]: what the configuration must do after the trigger (server only).
LoadGoal read_goal(Reader& r) {
  LoadGoal g;
  if (auto v = r.duration("recover_within", kMaxScenarioDuration)) g.recover_within = *v;
  if (auto v = r.boolean("overloaded_to_end")) g.overloaded_to_end = *v;
  if (auto v = r.count("limit_settles_near", kMaxConcurrent)) g.limit_settles_near = *v;
  r.finish();
  if (g.limit_settles_near) return g;
  if (g.recover_within && g.overloaded_to_end) {
    r.fail("overloaded_to_end", "contradicts recover_within: give one of them");
  }
  if (!g.recover_within && !g.overloaded_to_end) {
    r.fail_here("needs recover_within, overloaded_to_end or limit_settles_near");
  }
  return g;
}

ResilienceConfig read_configuration(Reader& r, std::string name) {
  ResilienceConfig c;
  c.name = std::move(name);
  if (auto v = r.duration("timeout", kMaxCallDuration)) {
    if (*v <= Nanos::zero())
      r.fail("timeout", "must be positive (got " + format_duration(*v) + ")");
    c.timeout = *v;
  }
  if (auto v = r.choice("breaker_scope", {"call", "attempt"})) {
    c.breaker_scope = *v == "attempt" ? BreakerScope::attempt : BreakerScope::call;
  }
  if (auto v = r.duration("alert_when_open_for", kMaxScenarioDuration)) {
    if (*v <= Nanos::zero()) {
      r.fail("alert_when_open_for", "must be positive (got " + format_duration(*v) + ")");
    }
    c.alert_when_open_for = *v;
  }
  if (auto t = r.table("breaker")) c.breaker = read_breaker(*t);
  if (auto t = r.table("bulkhead")) c.bulkhead = read_bulkhead(*t);
  if (auto t = r.table("retry")) c.retry = read_retry(*t);
  if (auto t = r.table("retry_budget")) c.retry_budget = read_retry_budget(*t);
  if (auto t = r.table("fallback")) c.fallback = read_fallback(*t);
  if (auto t = r.table("goal")) c.goal = read_goal(*t);
  if (auto t = r.table("adaptive_limit")) c.adaptive_limit = read_adaptive_limit(*t);
  if (auto t = r.table("throttle")) c.throttle = read_throttle(*t);
  if (auto t = r.table("shedder")) c.shedder = read_shedder(*t);
  r.finish();
  if (c.goal && c.goal->limit_settles_near && !c.adaptive_limit &&
      !(c.shedder && c.shedder->adaptive_limit)) {
    r.fail("goal", "limit_settles_near needs a [" + r.key_path("adaptive_limit") + "] table");
  }
  if (c.retry_budget && !c.retry) {
    r.fail("retry_budget", "needs a [" + r.key_path("retry") + "] table (a budget limits retries)");
  }
  if (r.has("breaker_scope") && !c.breaker) {
    r.fail("breaker_scope", "needs a [" + r.key_path("breaker") + "] table");
  }
  if (r.has("alert_when_open_for") && !c.breaker) {
    r.fail("alert_when_open_for", "needs a [" + r.key_path("breaker") + "] table");
  }
  return c;
}

// ---- scenario --------------------------------------------------------------------

constexpr double kZ99 = 2.3263478740408408;  // the standard normal's 99th percentile

Latency read_latency(Reader& phase, std::string_view key = "latency") {
  Latency l;
  const toml::node* n = phase.get(key);
  if (n == nullptr) {
    phase.fail_here("missing required key " + in_quotes(key) + " in " + phase.table_name());
  }
  if (n->is_string()) {  // "14s": a constant latency
    l.value = phase.required(phase.duration(key, kMaxCallDuration), key);
    return l;
  }
  if (!n->is_table()) {
    phase.fail(key,
               "expected a duration string such as \"120ms\" or a table such as "
               "{ distribution = \"lognormal\", median = \"120ms\", p99 = \"350ms\" }, "
               "got " +
                   type_name(*n));
  }
  auto r = phase.table(key);
  const std::string d =
      r->required(r->choice("distribution", {"constant", "uniform", "exponential", "lognormal"}),
                  "distribution");
  auto positive = [&](std::string_view k, Nanos v) {
    if (v <= Nanos::zero()) r->fail(k, "must be positive (got " + format_duration(v) + ")");
    return v;
  };
  if (d == "constant") {
    l.distribution = Latency::Distribution::constant;
    l.value = r->required(r->duration("value", kMaxCallDuration), "value");
    r->finish("distribution = \"constant\" takes value");
  } else if (d == "uniform") {
    l.distribution = Latency::Distribution::uniform;
    l.min = r->required(r->duration("min", kMaxCallDuration), "min");
    l.max = r->required(r->duration("max", kMaxCallDuration), "max");
    r->finish("distribution = \"uniform\" takes min and max");
    if (l.max < l.min) {
      r->fail("max", "must be at least min (got " + format_duration(l.max) + " < " +
                         format_duration(l.min) + ")");
    }
  } else if (d == "exponential") {
    l.distribution = Latency::Distribution::exponential;
    l.mean = positive("mean", r->required(r->duration("mean", kMaxCallDuration), "mean"));
    r->finish("distribution = \"exponential\" takes mean");
  } else {
    l.distribution = Latency::Distribution::lognormal;
    l.median = positive("median", r->required(r->duration("median", kMaxCallDuration), "median"));
    const auto sigma = r->number("sigma");
    const auto p99 = r->duration("p99", kMaxCallDuration);
    r->finish("distribution = \"lognormal\" takes median, and sigma or p99");
    if (sigma && p99) r->fail("p99", "give sigma or p99, not both");
    if (!sigma && !p99) r->fail_here("distribution = \"lognormal\" needs sigma or p99");
    if (sigma) {
      if (*sigma <= 0 || *sigma > 5) {
        r->fail("sigma", "must be in (0, 5] (got " + number_text(*sigma) + ")");
      }
      l.sigma = *sigma;
    } else {
      if (*p99 <= l.median) {
        r->fail("p99", "must be above median (got " + format_duration(*p99) +
                           " <= " + format_duration(l.median) + ")");
      }
      l.sigma =
          std::log(static_cast<double>(p99->count()) / static_cast<double>(l.median.count())) /
          kZ99;
      if (l.sigma > 5) r->fail("p99", "is too far above the median (sigma would exceed 5)");
    }
  }
  return l;
}

Phase read_phase(Reader& r, const std::optional<Server>& server) {
  Phase p;
  if (auto v = r.string("name")) p.name = *v;
  p.start = r.required(r.duration("start", kMaxScenarioDuration), "start");
  if (server) {
    // The server's queueing makes the latency: a phase changes what makes it.
    if (r.has("latency")) {
      r.get("latency");
      r.fail("latency",
             "is not used with a [dependency.server]: the latency is queueing plus service "
             "time; give the phase a service_time (or workers) instead");
    }
    if (r.has("service_time")) p.service_time = read_latency(r, "service_time");
    if (auto v = r.count("workers", kMaxServerWorkers)) {
      if (*v < 1) r.fail("workers", "must be at least 1 (got 0)");
      p.workers = *v;
    }
    p.latency = p.service_time ? *p.service_time : server->service_time;
  } else {
    for (std::string_view key : {"workers", "service_time"}) {
      if (r.has(key)) {
        r.get(key);
        r.fail(key, "needs a [dependency.server] table (a dependency with finite capacity)");
      }
    }
    p.latency = read_latency(r);
  }
  if (auto v = r.number("arrival_rate")) {
    if (*v <= 0 || *v > kMaxRate) {
      r.fail("arrival_rate",
             "must be in (0, 1000000] requests per second (got " + number_text(*v) + ")");
    }
    p.arrival_rate = *v;
  }
  if (auto v = r.number("error_rate")) {
    if (*v < 0 || *v > 1) r.fail("error_rate", "must be in [0, 1] (got " + number_text(*v) + ")");
    p.error_rate = *v;
  }
  if (auto v = r.boolean("degraded")) p.degraded = *v;
  r.finish();
  return p;
}

// [dependency.server]: a dependency with finite capacity.
Server read_server(Reader& r) {
  Server s;
  s.workers = r.required(r.count("workers", kMaxServerWorkers), "workers");
  if (s.workers < 1) r.fail("workers", "must be at least 1 (got 0)");
  if (auto v = r.count("queue", kMaxServerQueue)) s.queue = *v;
  s.service_time = read_latency(r, "service_time");
  r.finish();
  return s;
}

// [fleet]: checked against the scenario it belongs to (its duration, its configurations).
FleetSpec read_fleet(Reader& r, const Scenario& s) {
  FleetSpec f;
  f.instances = r.required(r.count("instances", kMaxInstances), "instances");
  if (f.instances < 1) r.fail("instances", "must be at least 1 (got 0)");
  // The Fleet exchanges its periods in whole milliseconds.
  auto whole_ms = [&](std::string_view key, Nanos min, Nanos max) -> std::optional<Nanos> {
    auto v = r.duration(key, max);
    if (!v) return std::nullopt;
    if (*v < min) {
      r.fail(key,
             "must be at least " + format_duration(min) + " (got " + format_duration(*v) + ")");
    }
    if (*v % std::chrono::milliseconds(1) != Nanos::zero()) {
      r.fail(key, "must be a whole number of milliseconds (got " + format_duration(*v) + ")");
    }
    return v;
  };
  if (auto v = whole_ms("sync_interval", std::chrono::milliseconds(1), std::chrono::minutes(1))) {
    f.sync_interval = *v;
  }
  if (auto v = r.count("nodes", kMaxStoreNodes)) {
    if (*v < 1) r.fail("nodes", "must be at least 1 (got 0)");
    f.nodes = *v;
  }
  if (auto v = r.count("groups", kMaxStoreGroups)) {
    if (*v < f.nodes) {
      r.fail("groups", "must be at least nodes (" + std::to_string(f.nodes) + "; got " +
                           std::to_string(*v) + "): every node holds a group");
    }
    f.groups = *v;
  } else {
    f.groups = f.nodes;
  }
  // A list: one round trip per node; an exchange waits for the slowest.
  if (const toml::node* list = r.get("store_latency"); list != nullptr && list->is_array()) {
    const toml::array& a = *list->as_array();
    if (a.size() != f.nodes) {
      r.fail("store_latency", "a list must have one latency per node (" + std::to_string(f.nodes) +
                                  "; got " + std::to_string(a.size()) + ")");
    }
    for (std::size_t i = 0; i < a.size(); ++i) {
      const std::string path = r.key_path("store_latency") + "[" + std::to_string(i) + "]";
      const auto text = a.get(i)->value<std::string>();
      if (!text) {
        throw InputError(r.where(*a.get(i)), path,
                         "expected a duration string such as \"1ms\", got " + type_name(*a.get(i)));
      }
      const auto d = parse_duration(*text);
      if (!d) throw InputError(r.where(*a.get(i)), path, d.error());
      if (*d > std::chrono::minutes(1)) {
        throw InputError(r.where(*a.get(i)), path,
                         "must be at most 1min (got " + format_duration(*d) + ")");
      }
      f.node_latency.push_back(*d);
    }
    const Nanos slowest = *std::max_element(f.node_latency.begin(), f.node_latency.end());
    if (slowest >= f.sync_interval) {
      r.fail("store_latency", "must be shorter than sync_interval (" +
                                  format_duration(f.sync_interval) + "; the slowest node's is " +
                                  format_duration(slowest) +
                                  "): one exchange at a time per instance");
    }
    f.store_latency = slowest;
  } else if (auto v = r.duration("store_latency", std::chrono::minutes(1))) {
    if (*v >= f.sync_interval) {
      r.fail("store_latency", "must be shorter than sync_interval (" +
                                  format_duration(f.sync_interval) + "; got " +
                                  format_duration(*v) + "): one exchange at a time per instance");
    }
    f.store_latency = *v;
  } else if (f.store_latency >= f.sync_interval) {
    f.store_latency = Nanos::zero();
  }
  if (auto v = r.count("quorum", kMaxInstances)) {
    if (*v < 1 || *v > f.instances) {
      r.fail("quorum", "must be in 1..instances (" + std::to_string(f.instances) + "; got " +
                           std::to_string(*v) + ")");
    }
    f.quorum = *v;
  }
  if (auto v = whole_ms("quorum_window", std::chrono::milliseconds(1), kMaxConfigDuration)) {
    f.quorum_window = *v;
  }
  if (auto v = whole_ms("lease_duration", std::chrono::milliseconds(0), kMaxConfigDuration)) {
    f.lease_duration = *v;
  }
  if (auto v = r.boolean("sync_on_open")) f.sync_on_open = *v;
  if (auto v = r.boolean("fleet_window")) f.fleet_window = *v;
  if (const toml::array* list = r.array("outages")) {
    if (list->size() > kMaxOutages) {
      r.fail("outages", "has more than " + std::to_string(kMaxOutages) + " outages (got " +
                            std::to_string(list->size()) + ")");
    }
    for (std::size_t i = 0; i < list->size(); ++i) {
      const toml::node& n = *list->get(i);
      const std::string path = r.key_path("outages") + "[" + std::to_string(i) + "]";
      if (!n.is_table()) {
        throw InputError(r.where(n), path,
                         "expected a table such as { start = \"2min\", end = \"2min 30s\" }, got " +
                             type_name(n));
      }
      Reader o(*n.as_table(), path, r.file());
      StoreOutage out;
      out.start = o.required(o.duration("start", kMaxScenarioDuration), "start");
      out.end = o.required(o.duration("end", kMaxScenarioDuration), "end");
      o.finish();
      if (out.end <= out.start) {
        o.fail("end", "must be after start (" + format_duration(out.start) + "; got " +
                          format_duration(out.end) + ")");
      }
      if (out.start >= s.duration) {
        o.fail("start",
               "is not before the scenario's end (duration " + format_duration(s.duration) + ")");
      }
      f.outages.push_back(out);
    }
  }
  if (auto t = r.table("failover")) {
    StoreFailover fo;
    if (auto v = t->count("node", kMaxStoreNodes)) {
      if (*v >= f.nodes) {
        t->fail("node", "must be in 0..nodes-1 (" + std::to_string(f.nodes - 1) + "; got " +
                            std::to_string(*v) + ")");
      }
      fo.node = *v;
    }
    fo.at = t->required(t->duration("at", kMaxScenarioDuration), "at");
    if (fo.at >= s.duration) {
      t->fail("at",
              "is not before the scenario's end (duration " + format_duration(s.duration) + ")");
    }
    if (auto v = t->duration("down", kMaxScenarioDuration)) {
      if (*v <= Nanos::zero()) t->fail("down", "must be longer than 0s");
      fo.down = *v;
    }
    if (auto v = t->choice("replica", {"lost", "kept"})) fo.replica_kept = *v == "kept";
    t->finish();
    f.failover = fo;
  }
  if (const toml::array* list = r.array("configurations")) {
    if (list->empty()) r.fail("configurations", "names no configuration");
    for (std::size_t i = 0; i < list->size(); ++i) {
      const toml::node& n = *list->get(i);
      const std::string path = r.key_path("configurations") + "[" + std::to_string(i) + "]";
      const auto name = n.value<std::string>();
      if (!name) throw InputError(r.where(n), path, "expected a string, got " + type_name(n));
      const auto c = std::find_if(s.configurations.begin(), s.configurations.end(),
                                  [&](const ResilienceConfig& rc) { return rc.name == *name; });
      if (c == s.configurations.end()) {
        std::string names;
        for (const auto& rc : s.configurations) {
          names += (names.empty() ? "" : ", ") + in_quotes(rc.name);
        }
        throw InputError(
            r.where(n), path,
            "no configuration named " + in_quotes(*name) + " (the scenario has " + names + ")");
      }
      if (!c->breaker) {
        throw InputError(r.where(n), path,
                         "configuration " + in_quotes(*name) +
                             " has no breaker: a fleet shares breakers' decisions");
      }
      if (std::find(f.configurations.begin(), f.configurations.end(), *name) !=
          f.configurations.end()) {
        throw InputError(r.where(n), path, "names " + in_quotes(*name) + " twice");
      }
      f.configurations.push_back(*name);
    }
  } else {
    for (const ResilienceConfig& c : s.configurations) {
      if (c.breaker) f.configurations.push_back(c.name);
    }
    if (f.configurations.empty()) {
      r.fail_here(
          "no configuration of the scenario has a breaker: a fleet shares breakers' "
          "decisions");
    }
  }
  r.finish();
  return f;
}

std::string work_refusal(const Scenario& s, bool as_fleet, const WorkEstimate& w);

Scenario read_scenario(Reader& root) {
  Scenario s;
  s.source = *root.file();
  if (auto v = root.string("name")) s.name = *v;
  if (auto v = root.string("description", kMaxDescriptionBytes)) s.description = *v;
  s.duration = root.required(root.duration("duration"), "duration");
  if (s.duration <= Nanos::zero()) root.fail("duration", "must be positive");
  if (s.duration > kMaxScenarioDuration) root.fail("duration", "must be at most 30 days");
  if (auto v = root.unsigned_integer("seed", std::numeric_limits<std::int64_t>::max())) s.seed = *v;

  {
    auto r = root.table("arrivals");
    if (!r) root.fail_here("missing required table [arrivals]");
    if (auto v = r->choice("process", {"poisson", "constant"})) {
      s.arrivals.process = *v == "constant" ? ArrivalProcess::constant : ArrivalProcess::poisson;
    }
    s.arrivals.rate = r->required(r->number("rate"), "rate");
    r->finish();
    if (s.arrivals.rate <= 0 || s.arrivals.rate > kMaxRate) {
      r->fail("rate", "must be in (0, 1000000] requests per second (got " +
                          number_text(s.arrivals.rate) + ")");
    }
  }
  {
    auto r = root.table("caller");
    if (!r) root.fail_here("missing required table [caller]");
    // Each busy worker is a request in flight, about 200 bytes in the simulator.
    s.caller.workers = r->required(r->count("workers", kMaxWorkers), "workers");
    if (auto v = r->duration("work", kMaxCallDuration)) s.caller.work = *v;
    r->finish();
    if (s.caller.workers < 1) r->fail("workers", "must be at least 1 (got 0)");
  }
  {
    auto r = root.table("dependency");
    if (!r) root.fail_here("missing required table [dependency]");
    if (auto v = r->string("name")) s.dependency.name = *v;
    if (auto t = r->table("server")) s.dependency.server = read_server(*t);
    const toml::node* phases = r->get("phases");
    if (phases == nullptr) r->fail_here("missing required key \"phases\" in " + r->table_name());
    const toml::array* list = phases->as_array();
    if (list == nullptr || list->empty() || !list->is_array_of_tables()) {
      r->fail("phases", "expected one or more [[dependency.phases]] tables");
    }
    if (list->size() > kMaxPhases) {
      r->fail("phases", "has more than " + std::to_string(kMaxPhases) + " phases (got " +
                            std::to_string(list->size()) + ")");
    }
    for (std::size_t i = 0; i < list->size(); ++i) {
      Reader pr(*list->get(i)->as_table(), r->key_path("phases") + "[" + std::to_string(i) + "]",
                root.file());
      Phase p = read_phase(pr, s.dependency.server);
      if (i == 0 && p.start != Nanos::zero()) {
        pr.fail("start",
                "the first phase must start at \"0s\" (got " + format_duration(p.start) + ")");
      }
      if (i > 0 && p.start <= s.dependency.phases.back().start) {
        pr.fail("start", "must be after the previous phase's start (" +
                             format_duration(s.dependency.phases.back().start) + ")");
      }
      if (p.start >= s.duration) {
        pr.fail("start", "is not before the scenario's end (duration " +
                             format_duration(s.duration) + "): the phase would never run");
      }
      if (p.name.empty()) p.name = "phase " + std::to_string(i + 1);
      s.dependency.phases.push_back(std::move(p));
    }
    r->finish();
  }
  {
    auto r = root.table("config");
    if (!r)
      root.fail_here("missing required table [config.NAME]: at least one configuration to run");
    // Tables are kept sorted by name; the report keeps the file's order.
    std::vector<std::pair<toml::source_position, std::string>> names;
    const toml::node* node = root.get("config");
    for (auto&& [k, v] : *node->as_table())
      names.emplace_back(k.source().begin, std::string(k.str()));
    std::sort(names.begin(), names.end(), [](const auto& a, const auto& b) {
      return a.first.line != b.first.line ? a.first.line < b.first.line
                                          : a.first.column < b.first.column;
    });
    if (names.empty()) r->fail_here("needs at least one [config.NAME] table");
    if (names.size() > kMaxConfigurations) {
      r->fail(names[kMaxConfigurations].second,
              "is configuration " + std::to_string(kMaxConfigurations + 1) +
                  ": a scenario has at most " + std::to_string(kMaxConfigurations) +
                  " (they are reported side by side)");
    }
    for (const auto& [pos, name] : names) {
      if (name.size() > kMaxNameBytes) {
        r->fail(name, "the configuration's name must be at most " + std::to_string(kMaxNameBytes) +
                          " bytes long (got " + std::to_string(name.size()) + ")");
      }
      auto c = r->table(name);
      s.configurations.push_back(read_configuration(*c, name));
      if (s.configurations.back().shedder && !s.dependency.server) {
        c->fail("shedder",
                "needs a [dependency.server] table (the shedder stands in front of a server)");
      }
    }
    r->finish();
  }
  if (auto r = root.table("fleet")) s.fleet = read_fleet(*r, s);
  if (s.fleet && s.dependency.server) {
    root.fail("fleet",
              "cannot run with a [dependency.server] yet: each instance would get a "
              "server of its own");
  }
  root.finish();
  // The run it describes must end while a person waits for it: refused naming the key
  // most of its work comes from, at its line.
  const WorkEstimate work = estimate_work(s, s.fleet.has_value());
  if (work.seconds > kMaxRunSeconds) {
    const toml::node* at = root.get("duration");
    if (work.heaviest == "fleet.sync_interval") {
      const toml::node* fleet = root.get("fleet");
      at = fleet;
      if (const toml::node* n = fleet->as_table()->get("sync_interval")) at = n;
    } else if (work.heaviest_configuration) {
      const std::string& name = s.configurations[*work.heaviest_configuration].name;
      const toml::node* retry = root.get("config")->as_table()->get(name)->as_table()->get("retry");
      at = retry;
      if (const toml::node* n = retry->as_table()->get("max_attempts")) at = n;
    }
    throw InputError(root.where(*at), work.heaviest, work_refusal(s, s.fleet.has_value(), work));
  }
  return s;
}

}  // namespace

namespace {

// Measured CPU time per unit of work, rounded up (include/bulwark/lab/config.h; measured
// by tools/lab/bench/work_costs.py, docs/lab.md "How long a run may take").
double attempt_cost(std::uint64_t workers) {
  return workers <= 1'000     ? 0.3e-6
         : workers <= 10'000  ? 0.5e-6
         : workers <= 100'000 ? 0.75e-6
                              : 1.3e-6;
}
double fleet_attempt_cost(std::uint32_t instances, std::uint32_t workers) {
  const double by_instances = instances <= 100 ? 0.9e-6 : instances <= 1'000 ? 1.6e-6 : 3.2e-6;
  // Every instance's calls in flight are in the one event loop.
  return std::max(by_instances, attempt_cost(std::uint64_t{instances} * workers));
}
double sync_cost(std::uint32_t instances) {
  return instances <= 100 ? 0.5e-6 : instances <= 1'000 ? 0.7e-6 : 2.2e-6;
}

std::string about(double seconds) {
  std::ostringstream o;
  o.precision(2);
  if (seconds < 120) {
    o << "about " << std::ceil(seconds) << " seconds";
  } else if (seconds < 2 * 3600) {
    o << "about " << std::round(seconds / 60) << " minutes";
  } else {
    o << "about " << std::round(seconds / 3600) << " hours";
  }
  return o.str();
}

std::string microseconds(double seconds) { return number_text(seconds * 1e6) + "us"; }

// A large count in two digits: 2e9, 1.2e8; smaller ones whole.
std::string rounded(double v) {
  if (v < 1e6) return std::to_string(static_cast<long long>(std::llround(v)));
  const int e = static_cast<int>(std::floor(std::log10(v)));
  const double m = std::round(v / std::pow(10.0, e) * 10) / 10;
  return number_text(m) + "e" + std::to_string(e);
}

}  // namespace

WorkEstimate estimate_work(const Scenario& s, bool as_fleet) {
  WorkEstimate w;
  double rate = s.arrivals.rate;  // the highest a phase sets, for a bound
  for (const Phase& p : s.dependency.phases) rate = std::max(rate, p.arrival_rate.value_or(0));
  w.requests = rate * std::chrono::duration<double>(s.duration).count();
  w.heaviest = "duration";
  double heaviest_cost = -1;
  const auto blame = [&](double cost, const ResilienceConfig* c) {
    if (cost <= heaviest_cost) return;
    heaviest_cost = cost;
    w.heaviest_configuration.reset();
    if (c == nullptr) {
      w.heaviest = "fleet.sync_interval";
    } else if (c->retry) {
      w.heaviest = "config." + escape_for_error(c->name) + ".retry.max_attempts";
      w.heaviest_configuration = static_cast<std::size_t>(c - s.configurations.data());
    } else {
      w.heaviest = "duration";
    }
  };
  if (!as_fleet || !s.fleet) {
    // Side by side on two cores: the longest configuration, or half of them all.
    double sum = 0, longest = 0;
    for (const ResilienceConfig& c : s.configurations) {
      const double attempts = w.requests * (c.retry ? c.retry->config.max_attempts : 1);
      const double cost = attempts * attempt_cost(s.caller.workers);
      w.attempts += attempts;
      sum += cost;
      longest = std::max(longest, cost);
      blame(cost, &c);
    }
    w.seconds = std::max(longest, sum / 2);
    return w;
  }
  // A fleet: per configuration, the single instance, then the isolated and the shared
  // fleets, one after another.
  const FleetSpec& f = *s.fleet;
  w.fleet_syncs = static_cast<double>(f.instances) *
                  (static_cast<double>(s.duration.count()) /
                   static_cast<double>(std::max<Nanos::rep>(1, f.sync_interval.count())));
  // A sharded store: each sync asks every group (about 0.25 us each beyond the first).
  const double syncs_cost =
      w.fleet_syncs * (sync_cost(f.instances) + 0.25e-6 * static_cast<double>(f.groups - 1));
  for (const ResilienceConfig& c : s.configurations) {
    if (std::find(f.configurations.begin(), f.configurations.end(), c.name) ==
        f.configurations.end()) {
      continue;
    }
    const double attempts = w.requests * (c.retry ? c.retry->config.max_attempts : 1);
    const double cost = attempts * attempt_cost(s.caller.workers) +
                        2 * attempts * fleet_attempt_cost(f.instances, s.caller.workers);
    w.attempts += 3 * attempts;
    w.seconds += cost + syncs_cost;
    blame(cost, &c);
    blame(syncs_cost, nullptr);
  }
  return w;
}

namespace {

// Why the run is refused: its estimate, where the work comes from, what to lower.
std::string work_refusal(const Scenario& s, bool as_fleet, const WorkEstimate& w) {
  const bool fleet = as_fleet && s.fleet;
  const double per_attempt = fleet ? fleet_attempt_cost(s.fleet->instances, s.caller.workers)
                                   : attempt_cost(s.caller.workers);
  std::string why =
      "would take " + about(w.seconds) +
      " to simulate on a 2-core machine, and the lab runs at most " + number_text(kMaxRunSeconds) +
      " seconds: in the worst case (every attempt failing and retried) " + rounded(w.attempts) +
      " attempts (" +
      (s.arrivals.rate >= 1e6 ? rounded(s.arrivals.rate) : number_text(s.arrivals.rate)) +
      " requests/s for " + format_duration(s.duration) + ", times max_attempts, " +
      (fleet ? "three runs per fleet configuration" : "over the configurations") + ") at " +
      microseconds(per_attempt) + " each";
  if (fleet) {
    why += ", and " + rounded(w.fleet_syncs) + " fleet syncs (" +
           std::to_string(s.fleet->instances) + " instances, each every " +
           format_duration(s.fleet->sync_interval) + ") at " +
           microseconds(sync_cost(s.fleet->instances)) + " each";
  }
  why += "; shorten the duration, lower the rate or max_attempts";
  if (fleet) why += ", or use fewer instances or a longer sync_interval";
  return "this scenario " + why;
}

}  // namespace

void check_work(const Scenario& s, bool as_fleet, const std::string& field) {
  const WorkEstimate w = estimate_work(s, as_fleet);
  if (w.seconds <= kMaxRunSeconds) return;
  throw InputError({field.empty() ? s.source : std::string()}, field.empty() ? w.heaviest : field,
                   work_refusal(s, as_fleet, w));
}

std::optional<Nanos> Scenario::degraded_from() const {
  for (const Phase& p : dependency.phases) {
    if (p.degraded) return p.start;
  }
  return std::nullopt;
}

Nanos Scenario::degraded_until() const {
  bool in = false;
  for (const Phase& p : dependency.phases) {
    if (p.degraded) in = true;
    if (in && !p.degraded) return p.start;
  }
  return duration;
}

Scenario parse_scenario(std::string_view text, const std::string& source_name,
                        std::vector<InputError>* warnings) {
  const toml::table doc = parse_toml(text, source_name);
  Reader root(doc, "", std::make_shared<const std::string>(source_name));
  root.set_warnings(warnings);
  return read_scenario(root);
}

Scenario load_scenario_file(const std::string& path, std::vector<InputError>* warnings) {
  return parse_scenario(read_file(path), path == "-" ? "<stdin>" : path, warnings);
}

Scenario builtin_scenario() { return parse_scenario(builtin_scenario_toml(), "built-in"); }

Scenario builtin_scenario(std::string_view name, const std::string& field) {
  const std::string_view text = builtin_scenario_toml(name);
  if (text.empty()) {
    std::string names;
    for (std::string_view n : kBuiltinScenarioNames)
      names += (names.empty() ? "" : ", ") + in_quotes(n);
    throw InputError(
        {}, field, "no built-in scenario named " + in_quotes(name) + " (there are " + names + ")");
  }
  if (name == "incident") return builtin_scenario();
  return parse_scenario(text, "built-in " + std::string(name));
}

BreakerSpec parse_breaker(std::string_view text, const std::string& source_name,
                          std::vector<InputError>* warnings) {
  const toml::table doc = parse_toml(text, source_name);
  Reader root(doc, "", std::make_shared<const std::string>(source_name));
  root.set_warnings(warnings);
  auto breaker = root.table("breaker");
  root.finish("a breaker file has one [breaker] table");
  if (!breaker) root.fail_here("missing the [breaker] table");
  return read_breaker(*breaker);
}

BreakerSpec load_breaker_file(const std::string& path, std::vector<InputError>* warnings) {
  return parse_breaker(read_file(path), path == "-" ? "<stdin>" : path, warnings);
}

const std::string& BreakerSpec::name() const {
  return std::visit([](const auto& c) -> const std::string& { return c.name; }, config);
}

Nanos BreakerSpec::slow_call_duration() const {
  if (const auto* c = std::get_if<CountWindowConfig>(&config)) return c->slow_call_duration;
  if (const auto* c = std::get_if<TimeWindowConfig>(&config)) return c->slow_call_duration;
  return Nanos::zero();
}

std::string_view to_string(WindowKind kind) noexcept {
  switch (kind) {
    case WindowKind::none:
      return "none";
    case WindowKind::count:
      return "count";
    case WindowKind::time:
      return "time";
  }
  return "unknown";
}

std::string_view to_string(ArrivalProcess process) noexcept {
  return process == ArrivalProcess::constant ? "constant" : "poisson";
}

std::string_view to_string(Latency::Distribution d) noexcept {
  switch (d) {
    case Latency::Distribution::constant:
      return "constant";
    case Latency::Distribution::uniform:
      return "uniform";
    case Latency::Distribution::exponential:
      return "exponential";
    case Latency::Distribution::lognormal:
      return "lognormal";
  }
  return "unknown";
}

std::string describe(const Latency& l) {
  switch (l.distribution) {
    case Latency::Distribution::constant:
      return format_duration(l.value);
    case Latency::Distribution::uniform:
      return "uniform " + format_duration(l.min) + ".." + format_duration(l.max);
    case Latency::Distribution::exponential:
      return "exponential mean " + format_duration(l.mean);
    case Latency::Distribution::lognormal: {
      const double p99 = static_cast<double>(l.median.count()) * std::exp(l.sigma * kZ99);
      return "lognormal median " + format_duration(l.median) + ", p99 " +
             format_duration(Nanos(static_cast<std::int64_t>(std::llround(p99 / 1e6) * 1'000'000)));
    }
  }
  return "";
}

}  // namespace bulwark::lab

// ---- bulwark::config: a service's named policies ---------------------------------

namespace bulwark::lab {
namespace {

constexpr std::string_view kSections[] = {"breaker", "retry",      "retry_budget", "bulkhead",
                                          "timeout", "fallback",   "pipeline",     "registry",
                                          "fleet",   "http_client"};

// A fleet's keys whose environment value is text as it is, never TOML: a secret or a
// pod's name that happens to read as a number, a boolean or a quoted string arrives
// unchanged (the key path below the fleet's name).
bool verbatim_text(const std::vector<std::string>& path) {
  if (path.size() < 3 || path[0] != "fleet") return false;
  if (path.size() == 3) return path[2] == "instance";
  return path.size() == 4 && path[2] == "store" &&
         (path[3] == "host" || path[3] == "username" || path[3] == "password" ||
          path[3] == "prefix");
}

// A policy name as an environment variable spells it: lower case, '-' as '_'.
std::string env_form(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    c = c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

// BULWARK__SECTION__NAME__KEY...=VALUE: sets one key of the document, the value parsed
// as TOML (or taken as a string), its source the variable's name so errors name it.
void apply_environment(toml::table& doc, const config::Environment& env) {
  constexpr std::string_view kPrefix = "BULWARK__";
  for (const auto& entry : env) {
    // Named, not structured bindings: lambdas below use them (clang 14 cannot capture
    // a structured binding).
    const std::string& var = entry.first;
    const std::string& value = entry.second;
    if (var.rfind(kPrefix, 0) != 0) continue;
    const std::string source = "environment variable " + printable(var);
    const auto fail = [&](std::string message) -> void {
      throw InputError({source, 0, 0}, "", std::move(message));
    };
    std::vector<std::string> parts;
    for (std::size_t at = kPrefix.size();;) {
      const std::size_t next = var.find("__", at);
      parts.push_back(env_form(var.substr(at, next == std::string::npos ? next : next - at)));
      if (next == std::string::npos) break;
      at = next + 2;
    }
    if (parts.size() < 2 || std::find(parts.begin(), parts.end(), "") != parts.end()) {
      fail("expected BULWARK__SECTION__NAME__KEY (parts separated by two underscores)");
    }
    if (std::find(std::begin(kSections), std::end(kSections), parts[0]) == std::end(kSections)) {
      std::string list;
      for (std::string_view s : kSections) list += (list.empty() ? "" : ", ") + std::string(s);
      fail("no section " + in_quotes(parts[0]) + " (sections are " + list + ")");
    }
    toml::table* table = doc[parts[0]].as_table();
    if (table == nullptr) fail("the file has no [" + parts[0] + "] section");
    // The policy's name as the file spells it.
    std::string name;
    for (auto&& [k, v] : *table) {
      if (env_form(k.str()) == parts[1]) name = std::string(k.str());
    }
    if (name.empty()) fail("the file has no " + parts[0] + " named " + in_quotes(parts[1]));
    std::vector<std::string> path{parts[0], name};
    path.insert(path.end(), parts.begin() + 2, parts.end());
    for (std::size_t i = 1; i + 1 < path.size(); ++i) {
      toml::node* n = table->get(path[i]);
      if (n == nullptr) n = &table->insert(path[i], toml::table{}).first->second;
      if (!n->is_table()) fail(path[i] + " is not a table in the file");
      table = n->as_table();
    }
    // The value: TOML if it parses as one (unless the key takes text only), else a
    // string, parsed from a TOML string so that its errors name the variable too.
    const auto as_text = [&] {
      std::string quoted = "\"";
      for (const char c : value) {
        if (c == '"' || c == '\\') {
          quoted += '\\', quoted += c;
        } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          quoted += buf;
        } else {
          quoted += c;
        }
      }
      try {
        return toml::parse("v = " + quoted + "\"", std::string_view(source));
      } catch (const toml::parse_error&) {
        fail("is neither a TOML value nor text (it is not valid UTF-8)");
      }
      return toml::table{};
    };
    toml::table parsed;
    if (verbatim_text(path)) {
      parsed = as_text();
    } else {
      try {
        parsed = toml::parse("v = " + value, std::string_view(source));
      } catch (const toml::parse_error&) {
        parsed = as_text();
      }
    }
    parsed.get("v")->visit([&](auto&& v) { table->insert_or_assign(path.back(), std::move(v)); });
  }
}

// A reference to another section's policy by name, resolved.
template <class Map>
const typename Map::mapped_type* named(Reader& r, std::string_view key, const Map& map,
                                       std::string_view section) {
  auto name = r.string(key);
  if (!name) return nullptr;
  const auto it = map.find(*name);
  if (it == map.end()) {
    std::string names;
    for (const auto& [n, v] : map) names += (names.empty() ? "" : ", ") + in_quotes(n);
    r.fail(key, "no [" + std::string(section) + "." + escape_for_error(*name) + "] in the file" +
                    (names.empty() ? std::string() : " (there are " + names + ")"));
  }
  return &it->second;
}

// ---- [fleet.NAME]: bulwark::redis's FleetConfig, RedisConfig and ClusterConfig ------
//
// The config library does not link bulwark::redis, so the checks the redis library makes
// when a Fleet or a store is built are made here too, with the same bounds, to name the
// key and its line; the redis library checks again when bulwark/config/redis.h hands
// the values over.

// The redis library keeps its times in milliseconds: a finer duration is refused rather
// than rounded (a "500us" timeout would otherwise become zero).
std::optional<std::chrono::milliseconds> millis(Reader& r, std::string_view key) {
  const auto d = r.duration(key);
  if (!d) return std::nullopt;
  if (d->count() % 1000000 != 0) {
    r.fail(key, "must be a whole number of milliseconds (got " + format_duration(*d) + ")");
  }
  return std::chrono::duration_cast<std::chrono::milliseconds>(*d);
}

bool valid_instance_id(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  // ASCII only, whatever the locale (as the redis library checks it).
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == ':' || c == '-';
  });
}

// "host:port", the port 1..65535 (RedisClusterStore's seeds).
bool host_and_port(std::string_view a) {
  const auto colon = a.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == a.size()) return false;
  const std::string_view p = a.substr(colon + 1);
  if (p.size() > 5 || !std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  const int port = std::stoi(std::string(p));
  return port >= 1 && port <= 65535;
}

constexpr std::size_t kMaxSecretBytes = 1024;
constexpr std::uint32_t kMaxSeeds = 1000;
// The Fleet reserves its queue up front: bounded so that no file can ask for gigabytes.
constexpr std::uint32_t kMaxFleetQueue = 1000000;

// BULWARK__FLEET__<NAME>__<KEY>, as a deployment would write it.
std::string fleet_variable(const std::string& name, std::string_view key) {
  std::string v = "BULWARK__FLEET__" + env_form(name) + "__" + std::string(key);
  for (char& c : v) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return v;
}

config::FleetStoreSettings read_fleet_store(Reader& r, const std::string& name) {
  config::FleetStoreSettings s;
  if (auto v = r.string("host", 255)) s.host = *v;
  if (auto v = r.unsigned_integer("port", 65535)) s.port = static_cast<int>(*v);
  if (auto v = r.string("username", kMaxSecretBytes)) s.username = *v;
  if (auto v = r.string("password", kMaxSecretBytes)) s.password = *v;
  if (auto v = r.string("prefix")) s.prefix = *v;
  if (auto v = millis(r, "retention")) s.retention = *v;
  if (auto v = millis(r, "idle_ttl")) s.idle_ttl = *v;
  if (auto v = millis(r, "timeout")) s.timeout = *v;
  if (auto v = millis(r, "reconnect_min")) s.reconnect_min = *v;
  if (auto v = millis(r, "reconnect_max")) s.reconnect_max = *v;
  if (auto v = r.boolean("cluster")) s.cluster = *v;
  if (const toml::array* seeds = r.array("seeds")) {
    if (seeds->size() > kMaxSeeds) {
      r.fail("seeds", "must have at most " + std::to_string(kMaxSeeds) + " entries (got " +
                          std::to_string(seeds->size()) + ")");
    }
    for (const toml::node& n : *seeds) {
      const auto bad = [&](std::string message) {
        throw InputError(r.where(n), r.key_path("seeds"), std::move(message));
      };
      if (!n.is_string()) bad("expected \"host:port\" strings, got " + type_name(n));
      const std::string& seed = n.as_string()->get();
      if (!host_and_port(seed)) bad(in_quotes(seed) + " is not host:port (a port 1..65535)");
      s.seeds.push_back(seed);
    }
  }
  if (auto v = r.count("groups", std::numeric_limits<std::uint32_t>::max())) s.groups = *v;
  if (auto v = millis(r, "heartbeat")) s.heartbeat = *v;
  r.finish();
  // As RedisFleetStore's and RedisClusterStore's constructors check them.
  if (s.host.empty()) r.fail("host", "must not be empty");
  if (s.port == 0) r.fail("port", "must be in 1..65535, got 0");
  if (s.prefix.empty()) r.fail("prefix", "must not be empty");
  for (const char c : s.prefix) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
      r.fail("prefix", "must not contain spaces or control characters");
  }
  const auto open = s.prefix.find('{');
  const auto close = open == std::string::npos ? open : s.prefix.find('}', open + 1);
  if (close == std::string::npos) {
    r.fail("prefix",
           "must contain a hash tag {...} (" + in_quotes(s.prefix) +
               " has none), so that all of the fleet's keys share one Redis Cluster slot");
  }
  if (close == open + 1) {
    r.fail("prefix", "has an empty hash tag {} (" + in_quotes(s.prefix) +
                         "): Redis Cluster would hash each whole key, scattering the fleet's "
                         "keys over slots");
  }
  if (s.timeout <= std::chrono::milliseconds::zero()) r.fail("timeout", "must be positive");
  if (s.reconnect_min <= std::chrono::milliseconds::zero())
    r.fail("reconnect_min", "must be positive");
  if (s.retention <= std::chrono::milliseconds::zero()) r.fail("retention", "must be positive");
  if (s.idle_ttl < s.retention) {
    r.fail("idle_ttl", "must be at least retention (" + format_duration(s.retention) + ")");
  }
  if (s.reconnect_max < s.reconnect_min) {
    r.fail("reconnect_max",
           "must be at least reconnect_min (" + format_duration(s.reconnect_min) + ")");
  }
  if (s.password.empty() && !s.username.empty()) r.fail("password", "must be set when username is");
  if (s.groups < 1 || s.groups > 1000) {
    r.fail("groups", "must be in 1..1000, got " + std::to_string(s.groups));
  }
  if (s.heartbeat >= s.idle_ttl) {
    r.fail("heartbeat", "must be below idle_ttl (" + format_duration(s.idle_ttl) +
                            "), or a quiet group's keys expire between two heartbeats");
  }
  // A secret written in the file is in every copy of it (the repository, the image):
  // said once, at load, without its value.
  if (const toml::node* n = r.get("password");
      n != nullptr && r.where(*n).file == *r.file() && !s.password.empty()) {
    r.warn("password", "a password in the file: set it from the environment instead (" +
                           fleet_variable(name, "store__password") + ", e.g. from a secret)");
  }
  return s;
}

config::FleetSettings read_fleet_settings(Reader& r, const std::string& name) {
  config::FleetSettings f;
  f.name = name;
  const auto instance = r.string("instance", 64);
  if (auto v = r.count("quorum", std::numeric_limits<std::uint32_t>::max())) f.quorum = *v;
  if (auto v = millis(r, "quorum_window")) f.quorum_window = *v;
  if (auto v = millis(r, "sync_interval")) f.sync_interval = *v;
  if (auto v = millis(r, "lease_duration")) f.lease_duration = *v;
  if (auto v = r.count("queue_capacity", kMaxFleetQueue)) f.queue_capacity = *v;
  if (auto v = r.count("max_changes_per_sync", 100000)) f.max_changes_per_sync = *v;
  if (auto v = millis(r, "count_bucket")) f.count_bucket = *v;
  if (auto v = r.count("count_buckets", 1000)) f.count_buckets = *v;
  if (auto store = r.table("store")) f.store = read_fleet_store(*store, name);
  r.finish();
  // As the Fleet's constructor checks them.
  if (!instance) {
    r.fail_here("missing required key \"instance\" in " + r.table_name() +
                " (this instance's id in the fleet; usually set per instance: " +
                fleet_variable(name, "instance") + ")");
  }
  f.instance = *instance;
  if (!valid_instance_id(f.instance)) {
    r.fail("instance",
           "must be 1-64 characters from [A-Za-z0-9._:-] (got " + in_quotes(f.instance) + ")");
  }
  if (f.quorum == 0) r.fail("quorum", "must be at least 1");
  if (f.quorum_window <= std::chrono::milliseconds::zero())
    r.fail("quorum_window", "must be positive");
  if (f.sync_interval <= std::chrono::milliseconds::zero())
    r.fail("sync_interval", "must be positive");
  if (f.queue_capacity == 0) r.fail("queue_capacity", "must be at least 1");
  if (f.max_changes_per_sync == 0) r.fail("max_changes_per_sync", "must be in 1..100000, got 0");
  if (f.count_buckets == 0) r.fail("count_buckets", "must be in 1..1000, got 0");
  return f;
}

// ---- [http_client.NAME]: bulwark::http::Config's client-level fields --------------
//
// The config library does not link bulwark::http: the client's own checks are made here
// too, with its bounds (and bounds of our own on sizes), to name the key and its line;
// the client checks again when bulwark/config/http.h hands the values over.

constexpr std::size_t kMaxHttpBodyBytes = std::size_t{1} << 30;    // 1 GiB
constexpr std::size_t kMaxHttpHeaderBytes = std::size_t{1} << 20;  // 1 MiB
constexpr std::uint32_t kMaxHttpRedirects = 50;                    // as the client bounds it
constexpr std::size_t kMaxIdleHandles = 1024;
constexpr std::size_t kMaxOriginHeaders = 100;
constexpr std::size_t kMaxUserAgentBytes = 1024;

// An HTTP header name (RFC 9110's token), in ASCII whatever the locale.
bool header_token(std::string_view s) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
  });
}

config::HttpClientSettings read_http_client(Reader& r, const std::string& name,
                                            const config::Policies& p) {
  config::HttpClientSettings c;
  c.name = name;
  if (auto v = r.string("name")) c.name = *v;
  const auto pipeline = r.string("pipeline");
  if (auto v = r.choice("key_by", {"host", "route"})) {
    c.key_by = *v == "route" ? config::HttpKeyBy::route : config::HttpKeyBy::host;
  }
  c.default_timeout = r.duration("default_timeout", kMaxCallDuration);
  c.attempt_timeout = r.duration("attempt_timeout", kMaxCallDuration);
  c.connect_timeout = r.duration("connect_timeout", kMaxCallDuration);
  c.detailed_metrics = r.boolean("detailed_metrics");
  c.max_retry_after = r.duration("max_retry_after", kMaxCallDuration);
  c.max_body_bytes = r.unsigned_integer("max_body_bytes", kMaxHttpBodyBytes);
  c.max_header_bytes = r.unsigned_integer("max_header_bytes", kMaxHttpHeaderBytes);
  c.max_redirects = r.count("max_redirects", kMaxHttpRedirects);
  if (const toml::array* headers = r.array("origin_headers")) {
    if (headers->size() > kMaxOriginHeaders) {
      r.fail("origin_headers", "must have at most " + std::to_string(kMaxOriginHeaders) +
                                   " entries (got " + std::to_string(headers->size()) + ")");
    }
    c.origin_headers.emplace();
    for (const toml::node& n : *headers) {
      const auto bad = [&](std::string message) {
        throw InputError(r.where(n), r.key_path("origin_headers"), std::move(message));
      };
      if (!n.is_string()) bad("expected header names (strings), got " + type_name(n));
      const std::string& h = n.as_string()->get();
      if (!header_token(h)) bad(in_quotes(h) + " is not a header name");
      c.origin_headers->push_back(h);
    }
  }
  c.deadline_header = r.string("deadline_header");
  if (auto v = r.choice("deadline_header_format", {"grpc_timeout", "milliseconds"})) {
    c.deadline_header_format = *v == "milliseconds" ? DeadlineHeaderFormat::milliseconds
                                                    : DeadlineHeaderFormat::grpc_timeout;
  }
  c.idempotency_header = r.string("idempotency_header");
  c.make_idempotency_keys = r.boolean("make_idempotency_keys");
  c.max_idle_handles = r.unsigned_integer("max_idle_handles", kMaxIdleHandles);
  c.user_agent = r.string("user_agent", kMaxUserAgentBytes);
  r.finish();

  // As the client's constructor checks them.
  if (c.name.empty()) r.fail("name", "must not be empty");
  if (c.default_timeout && *c.default_timeout <= Nanos::zero())
    r.fail("default_timeout", "must be positive (got " + format_duration(*c.default_timeout) + ")");
  if (c.connect_timeout && *c.connect_timeout <= Nanos::zero())
    r.fail("connect_timeout", "must be positive (got " + format_duration(*c.connect_timeout) + ")");
  if (c.max_body_bytes && *c.max_body_bytes == 0) r.fail("max_body_bytes", "must be positive");
  if (c.max_header_bytes && *c.max_header_bytes < 256) {
    r.fail("max_header_bytes",
           "must be at least 256 (got " + std::to_string(*c.max_header_bytes) + ")");
  }
  if (c.deadline_header && !c.deadline_header->empty() && !header_token(*c.deadline_header)) {
    r.fail("deadline_header",
           "must be a header name or empty (got " + in_quotes(*c.deadline_header) + ")");
  }
  if (c.idempotency_header && !header_token(*c.idempotency_header)) {
    r.fail("idempotency_header",
           "must be a header name (got " + in_quotes(*c.idempotency_header) + ")");
  }
  if (c.user_agent) {
    for (const char ch : *c.user_agent) {
      if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f)
        r.fail("user_agent",
               "must not contain control characters (a line break would end the "
               "header)");
    }
  }

  // The pipeline its keys get: named, or the client's own name's.
  if (pipeline) {
    if (pipeline->empty()) r.fail("pipeline", "must not be empty (a [pipeline.NAME]'s name)");
    if (p.pipelines.find(*pipeline) == p.pipelines.end()) {
      std::string message = "no [pipeline." + escape_for_error(*pipeline) + "] in the file";
      std::string best, names;
      std::size_t best_d = std::max<std::size_t>(1, pipeline->size() / 4) + 1;
      for (const auto& [n, v] : p.pipelines) {
        names += (names.empty() ? "" : ", ") + in_quotes(n);
        const std::size_t d = edit_distance(*pipeline, n);
        if (d < best_d) best_d = d, best = n;
      }
      if (!best.empty()) {
        message += " (did you mean " + in_quotes(best) + "?)";
      } else if (!names.empty()) {
        message += " (there are " + names + ")";
      } else {
        message += " (it has no pipelines)";
      }
      r.fail("pipeline", std::move(message));
    }
    c.pipeline = *pipeline;
  } else if (p.pipelines.find(name) != p.pipelines.end()) {
    c.pipeline = name;
  }
  // One field, one place: the pipeline's timeout is the client's attempt_timeout.
  if (c.attempt_timeout && !c.pipeline.empty() && p.pipelines.at(c.pipeline).timeout) {
    r.fail("attempt_timeout", "is set by [pipeline." + escape_for_error(c.pipeline) +
                                  "] too (its timeout is the per-attempt one): set it in one "
                                  "place");
  }
  return c;
}

config::Policies read_policies(Reader& root) {
  config::Policies p;
  p.source = *root.file();
  // Each section: one table per name.
  const auto each = [&](std::string_view section, auto&& read) {
    auto t = root.table(section);
    if (!t) return;
    std::vector<std::pair<toml::source_position, std::string>> names;
    for (auto&& [k, v] : *root.get(section)->as_table()) {
      names.emplace_back(k.source().begin, std::string(k.str()));
    }
    for (const auto& [pos, name] : names) read(*t, name);
    t->finish();
  };
  const auto with_name = [](auto c, const std::string& name, bool has_name) {
    if (!has_name) c.name = name;
    return c;
  };
  // A breaker file as the lab writes it (`bulwark calibrate --toml`, `replay --config`):
  // one [breaker] table of keys, not of named tables, is one policy under its `name`.
  const toml::node* breaker_section = root.get("breaker");
  const toml::table* single = breaker_section != nullptr ? breaker_section->as_table() : nullptr;
  const auto holds_text = [&](std::string_view key) {
    const toml::node* n = single != nullptr ? single->get(key) : nullptr;
    return n != nullptr && n->is_string();
  };
  if (holds_text("name") || holds_text("kind")) {
    auto r = root.table("breaker");
    BreakerSpec spec = read_breaker(*r);
    std::string name = spec.name();
    p.breakers.emplace(std::move(name), std::move(spec));
  } else {
    each("breaker", [&](Reader& t, const std::string& name) {
      auto r = t.table(name);
      BreakerSpec spec = read_breaker(*r);
      if (!r->has("name")) std::visit([&](auto& c) { c.name = name; }, spec.config);
      p.breakers.emplace(name, std::move(spec));
    });
  }
  each("retry", [&](Reader& t, const std::string& name) {
    auto r = t.table(name);
    RetrySpec spec = read_retry(*r);
    spec.config.random = {};  // the library's thread-safe default
    p.retries.emplace(name, with_name(spec.config, name, r->has("name")));
  });
  each("retry_budget", [&](Reader& t, const std::string& name) {
    auto r = t.table(name);
    p.retry_budgets.emplace(name, with_name(read_retry_budget(*r), name, r->has("name")));
  });
  each("bulkhead", [&](Reader& t, const std::string& name) {
    auto r = t.table(name);
    p.bulkheads.emplace(name, with_name(read_bulkhead(*r), name, r->has("name")));
  });
  each("timeout", [&](Reader& t, const std::string& name) {
    const Nanos d = *t.duration(name, kMaxCallDuration);
    if (d <= Nanos::zero()) t.fail(name, "must be positive (got " + format_duration(d) + ")");
    p.timeouts.emplace(name, d);
  });
  each("fallback", [&](Reader& t, const std::string& name) {
    auto r = t.table(name);
    p.fallbacks.emplace(name, read_fallback(*r));
  });
  each("pipeline", [&](Reader& t, const std::string& name) {
    auto r = t.table(name);
    ResilienceConfig c;
    c.name = name;
    if (auto* b = named(*r, "breaker", p.breakers, "breaker")) c.breaker = *b;
    if (auto* v = named(*r, "retry", p.retries, "retry")) c.retry = RetrySpec{*v, 0};
    if (auto* v = named(*r, "retry_budget", p.retry_budgets, "retry_budget")) c.retry_budget = *v;
    if (auto* v = named(*r, "bulkhead", p.bulkheads, "bulkhead")) c.bulkhead = *v;
    if (auto* v = named(*r, "timeout", p.timeouts, "timeout")) c.timeout = *v;
    if (auto* v = named(*r, "fallback", p.fallbacks, "fallback")) c.fallback = *v;
    if (auto v = r->choice("breaker_scope", {"call", "attempt"})) {
      c.breaker_scope = *v == "attempt" ? BreakerScope::attempt : BreakerScope::call;
    }
    r->finish();
    if (c.retry_budget && !c.retry)
      r->fail("retry_budget", "needs a retry (a budget limits retries)");
    if (r->has("breaker_scope") && !c.breaker) r->fail("breaker_scope", "needs a breaker");
    p.pipelines.emplace(name, std::move(c));
  });
  each("registry", [&](Reader& t, const std::string& name) {
    auto r = t.table(name);
    config::RegistrySpec reg;
    reg.name = name;
    const std::string kind =
        r->required(r->choice("kind", {"consecutive", "count", "time"}), "kind");
    reg.kind = kind_of(kind);
    const BreakerSpec* policy = named(*r, "policy", p.breakers, "breaker");
    if (policy == nullptr) r->fail_here("missing required key \"policy\" (a breaker's name)");
    r->finish();
    if (policy->window() != reg.kind) {
      r->fail("policy", "names a breaker of kind = " +
                            in_quotes(policy->window() == WindowKind::none
                                          ? "consecutive"
                                          : std::string(to_string(policy->window()))) +
                            ", and this registry's kind is " + in_quotes(kind));
    }
    reg.policy = *policy;
    p.registries.emplace(name, std::move(reg));
  });
  each("fleet", [&](Reader& t, const std::string& name) {
    auto r = t.table(name);
    p.fleets.emplace(name, read_fleet_settings(*r, name));
  });
  each("http_client", [&](Reader& t, const std::string& name) {
    auto r = t.table(name);
    p.http_clients.emplace(name, read_http_client(*r, name, p));
  });
  root.finish(
      "a configuration file has the sections breaker, retry, retry_budget, bulkhead, "
      "timeout, fallback, pipeline, registry, fleet and http_client");
  return p;
}

}  // namespace
}  // namespace bulwark::lab

namespace bulwark::config {

Environment process_environment() {
  Environment env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (entry.rfind("BULWARK__", 0) != 0) continue;
    const std::size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace_back(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return env;
}

Policies parse(std::string_view text, const std::string& source_name, const Environment& env) {
  toml::table doc = lab::parse_toml(text, source_name);
  lab::apply_environment(doc, env);
  std::vector<ConfigError> warnings;
  lab::Reader root(doc, "", std::make_shared<const std::string>(source_name));
  root.set_warnings(&warnings);
  Policies p = lab::read_policies(root);
  p.warnings = std::move(warnings);
  return p;
}

Config::Config(std::string path, Policies policies, Environment env)
    : path_(std::move(path)),
      env_(std::move(env)),
      current_(std::make_shared<const Policies>(std::move(policies))) {}

std::shared_ptr<const Policies> Config::policies() const {
  std::lock_guard lock(mu_);
  return current_;
}

std::vector<ConfigError> Config::warnings() const { return policies()->warnings; }

template <class Map>
auto Config::find(const Map Policies::*map, std::string_view section, std::string_view name) const {
  const std::shared_ptr<const Policies> p = policies();
  const Map& m = (*p).*map;
  const auto it = m.find(name);
  if (it == m.end()) {
    std::string names;
    for (const auto& [n, v] : m) names += (names.empty() ? "" : ", ") + lab::quote_for_error(n);
    throw ConfigError({p->source}, std::string(section) + "." + lab::escape_for_error(name),
                      "no such " + std::string(section) + " in the file" +
                          (names.empty() ? std::string() : " (there are " + names + ")"));
  }
  return it->second;
}

void Config::wrong_kind(std::string_view name, WindowKind kind) const {
  throw ConfigError(
      {path_}, "breaker." + lab::escape_for_error(name) + ".kind",
      "is " +
          lab::quote_for_error(kind == WindowKind::none ? "consecutive" : lab::to_string(kind)) +
          ": ask for the breaker type of that kind");
}

lab::BreakerSpec Config::breaker_spec(std::string_view name) const {
  return find(&Policies::breakers, "breaker", name);
}
RetryConfig Config::retry(std::string_view name) const {
  return find(&Policies::retries, "retry", name);
}
RetryBudgetConfig Config::retry_budget(std::string_view name) const {
  return find(&Policies::retry_budgets, "retry_budget", name);
}
BulkheadConfig Config::bulkhead(std::string_view name) const {
  return find(&Policies::bulkheads, "bulkhead", name);
}
Nanos Config::timeout(std::string_view name) const {
  return find(&Policies::timeouts, "timeout", name);
}
Reasons Config::fallback(std::string_view name) const {
  return find(&Policies::fallbacks, "fallback", name);
}
lab::ResilienceConfig Config::pipeline(std::string_view name) const {
  return find(&Policies::pipelines, "pipeline", name);
}
RegistrySpec Config::registry(std::string_view name) const {
  return find(&Policies::registries, "registry", name);
}
FleetSettings Config::fleet(std::string_view name) const {
  return find(&Policies::fleets, "fleet", name);
}
HttpClientSettings Config::http_client(std::string_view name) const {
  return find(&Policies::http_clients, "http_client", name);
}

std::optional<ConfigError> Config::reload() {
  try {
    auto next = std::make_shared<const Policies>(parse(lab::read_file(path_), path_, env_));
    std::lock_guard lock(mu_);
    current_ = std::move(next);
    return std::nullopt;
  } catch (const ConfigError& e) {
    return e;
  }
}

Config load_file(const std::string& path, Environment env) {
  Policies p = parse(lab::read_file(path), path, env);
  return Config(path, std::move(p), std::move(env));
}

Config load_file(const std::string& path) { return load_file(path, process_environment()); }

}  // namespace bulwark::config
