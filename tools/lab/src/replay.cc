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
#include "replay_run.h"
#include "trace_reader.h"

namespace bulwark::lab {
namespace {

using detail::append_ms;
using detail::Row;
using detail::TraceReader;

// Replay keeps every key's breaker to the end (the summary reports each), so the
// number of distinct keys is bounded by what their breakers take: at most this much.
constexpr std::size_t kMaxKeyMemory = std::size_t{256} << 20;

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

struct FileCloser {
  void operator()(std::FILE* f) const noexcept {
    if (f != nullptr) std::fclose(f);
  }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

// ---- output ----------------------------------------------------------------------

// Holds the output until flush(): nothing is written for a trace with a bad row, which
// is found only as the replay reaches it. Past 1 MiB the lines go on to a temporary
// file, so memory does not grow with the output (one line per row with decisions).
class Writer {
 public:
  explicit Writer(std::FILE* out) : out_(out) { buf_.reserve(kSpillAt + 4096); }
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;
  std::string& buffer() { return buf_; }
  void end_line() {
    buf_ += '\n';
    if (buf_.size() >= kSpillAt) spill();
  }
  // Writes everything held to the output.
  void flush() {
    if (spill_) {
      spill();
      if (std::fflush(spill_.get()) != 0 || std::fseek(spill_.get(), 0, SEEK_SET) != 0) {
        throw std::runtime_error("cannot read back the temporary file of the output");
      }
      buf_.resize(kSpillAt);
      for (;;) {
        const std::size_t got = std::fread(buf_.data(), 1, buf_.size(), spill_.get());
        if (got == 0) break;
        write(buf_.data(), got);
      }
      if (std::ferror(spill_.get())) {
        throw std::runtime_error("cannot read back the temporary file of the output");
      }
      spill_.reset();
      buf_.clear();
    }
    write(buf_.data(), buf_.size());
    buf_.clear();
    if (std::fflush(out_) != 0) fail(errno);
  }

 private:
  static constexpr std::size_t kSpillAt = 1 << 20;

  void write(const char* data, std::size_t n) {
    if (n > 0 && std::fwrite(data, 1, n, out_) != n) fail(errno);
  }
  [[noreturn]] static void fail(int err) {
    throw std::runtime_error(std::string("cannot write the output: ") +
                             std::strerror(err != 0 ? err : EIO));
  }
  void spill() {
    if (!spill_) {
      spill_.reset(std::tmpfile());
      if (!spill_) throw std::runtime_error("cannot create a temporary file for the output");
    }
    if (!buf_.empty() && std::fwrite(buf_.data(), 1, buf_.size(), spill_.get()) != buf_.size()) {
      throw std::runtime_error("cannot write the output to a temporary file");
    }
    buf_.clear();
  }

  std::FILE* out_;
  std::string buf_;
  FilePtr spill_;
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
  // `out` null: nothing is written (the openings are still heard by `on_open`).
  Replayer(const BreakerSpec& spec, Writer* out, const ReplayOptions& options,
           std::function<void(Ticks, std::uint32_t)> on_open = {})
      : policy_(spec.as<typename B::Config>(), clock_),
        out_(out),
        on_open_(std::move(on_open)),
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

  // `same_key`: the row's key is the one of the call before (a hint; false says nothing).
  void arrival(const Row& row, bool same_key = false) {
    complete_until(row.t);
    clock_.set(Nanos(row.t));
    const std::uint32_t k = same_key && !keys_.empty() ? last_key_ : key_index(row.key);
    Key& key = *keys_[k];
    auto permit = key.breaker->try_acquire();
    if (options_.decisions && out_ != nullptr) decision(row.t, key, permit.has_value());
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
    if (out_ == nullptr) return;
    for (const auto& key : keys_) {
      const BreakerSnapshot snap = key->breaker->snapshot();
      std::string& b = out_->buffer();
      b += "{\"key\":";
      append_json_string(b, key->name);
      b += ",\"summary\":{\"permitted\":" + std::to_string(snap.permitted) +
           ",\"rejected\":" + std::to_string(snap.rejected) +
           ",\"success\":" + std::to_string(snap.successes) +
           ",\"failure\":" + std::to_string(snap.failures) +
           ",\"slow\":" + std::to_string(key->slow) +
           ",\"ignored\":" + std::to_string(snap.ignored) +
           ",\"opened\":" + std::to_string(snap.opens) + "}}";
      out_->end_line();
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
    // Runs of one key are common: the last key is checked before hashing.
    if (!keys_.empty() && keys_[last_key_]->name == name) return last_key_;
    if (auto it = index_.find(name); it != index_.end()) return last_key_ = it->second;
    auto key = std::make_unique<Key>();
    key->name = std::string(name);
    key->breaker = std::make_unique<B>(policy_);
    by_breaker_.emplace(key->breaker.get(), static_cast<std::uint32_t>(keys_.size()));
    index_.emplace(key->name, static_cast<std::uint32_t>(keys_.size()));
    keys_.push_back(std::move(key));
    return last_key_ = static_cast<std::uint32_t>(keys_.size() - 1);
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
    if (on_open_ && e.to == State::open) on_open_(e.at, it->second);
    if (out_ == nullptr) return;
    std::string& b = out_->buffer();
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
    out_->end_line();
  }

  void decision(Ticks t, const Key& key, bool permitted) {
    std::string& b = out_->buffer();
    b += "{\"t_ms\":";
    append_ms(b, t);
    b += ",\"key\":";
    append_json_string(b, key.name);
    b += permitted ? ",\"decision\":\"permitted\"}" : ",\"decision\":\"rejected\"}";
    out_->end_line();
  }

  ManualClock clock_;
  typename B::Policy policy_;
  Writer* out_;
  std::function<void(Ticks, std::uint32_t)> on_open_;
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
  std::uint32_t last_key_ = 0;
};

// Counts the distinct keys of the trace (by hash: a collision only undercounts)
// and refuses the key past which their breakers would take more than kMaxKeyMemory.
class KeyBudget {
 public:
  KeyBudget(std::size_t bytes_per_key, std::string name)
      : per_key_(bytes_per_key), name_(std::move(name)) {}

  // Every row of the trace, in order.
  void add(const Row& row) {
    if (seen_.size() > 0 && (row.same_key || row.key == last_)) return;  // the row before's
    last_.assign(row.key);
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
  std::string last_;
  std::size_t used_ = 0;
};

}  // namespace

namespace detail {
namespace {

template <class B>
class ReplayRunImpl final : public ReplayRun::Base {
 public:
  ReplayRunImpl(const BreakerSpec& spec, ReplayRun::OnOpen on_open)
      : replayer_(spec, nullptr, {}, std::move(on_open)) {}
  void call(const Row& row) override { replayer_.arrival(row); }
  void finish() override { replayer_.finish(); }

 private:
  Replayer<B> replayer_;
};

}  // namespace

ReplayRun::ReplayRun(const BreakerSpec& spec, OnOpen on_open) {
  impl_ = with_breaker_type(spec.window(), [&](auto type) -> std::unique_ptr<Base> {
    return std::make_unique<ReplayRunImpl<typename decltype(type)::type>>(spec, std::move(on_open));
  });
}
ReplayRun::~ReplayRun() = default;
void ReplayRun::call(const Row& row) { impl_->call(row); }
void ReplayRun::finish() { impl_->finish(); }

}  // namespace detail

void replay(const BreakerSpec& spec, std::FILE* in, const std::string& name, std::FILE* out,
            const ReplayOptions& options) {
  // One pass: every row is checked as it is replayed, and the output is held until the
  // last row has been (a bad row stops the replay with its error and nothing written).
  Writer writer(out);
  with_breaker_type(spec.window(), [&](auto type) {
    using B = typename decltype(type)::type;
    KeyBudget keys(Replayer<B>::bytes_per_key(spec), name);
    Replayer<B> replayer(spec, &writer, options);
    TraceReader reader(in, name);
    Row row;
    constexpr std::uint64_t kProgressEvery = 1 << 20;
    std::uint64_t rows = 0;
    while (reader.next(row)) {
      keys.add(row);
      replayer.arrival(row, row.same_key);
      if (++rows % kProgressEvery == 0 && options.progress) {
        options.progress(rows, false, options.progress_context);
      }
    }
    if (options.progress) options.progress(rows, true, options.progress_context);
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
