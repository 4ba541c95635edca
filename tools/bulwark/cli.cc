#include "cli.h"

#if defined(BULWARK_CLI_DEMO)
#include "demo.h"
#endif

#include <fcntl.h>
#include <stdio.h>  // fileno
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "bulwark/lab/calibrate.h"
#include "bulwark/lab/config.h"
#include "bulwark/lab/duration.h"
#include "bulwark/lab/fleet.h"
#include "bulwark/lab/input_error.h"
#include "bulwark/lab/replay.h"
#include "bulwark/lab/report.h"
#include "bulwark/lab/simulate.h"
#include "bulwark/version.h"

namespace bulwark::cli {
namespace {

using bulwark::lab::InputError;

constexpr int kBadInput = 2;
constexpr int kFailed = 1;
constexpr std::int64_t kMaxTimelineRows = 1'000'000;

// An empty file name is a mistake (an unset shell variable, say), never "no file".
void check_path(std::string_view flag, const std::string& path) {
  if (path.empty()) {
    throw InputError({}, std::string(flag),
                     "expected a file name or '-' (standard input or output), got an empty string");
  }
}

void check_output(std::string_view flag, const Given& path) {
  if (!path.given) return;
  check_path(flag, path.value);
  if (path.value != "-" && path.value.front() == '-') {
    throw InputError({}, std::string(flag),
                     "expected a file name or '-' (standard output), got " +
                         bulwark::lab::quote_for_error(path.value) +
                         ", which looks like an option; for a file whose name starts with "
                         "'-', write ./" +
                         bulwark::lab::escape_for_error(path.value));
  }
}

// Standard output, flushed and checked: a write that failed (a full disk, /dev/full, a
// pipe whose reader is gone) is an error with its reason, never a silent exit 0.
void flush_stdout() {
  // A write that failed earlier (the stream went bad) left its reason in errno.
  int err = errno;
  bool ok = std::cout.good();
  if (ok) {
    errno = 0;
    std::cout.flush();
    err = errno;
    ok = std::cout.good();
  }
  if (ok) {
    errno = 0;
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) ok = false, err = errno;
  }
  if (!ok) {
    throw std::runtime_error(std::string("cannot write to standard output: ") +
                             std::strerror(err != 0 ? err : EIO));
  }
}

void write_stdout(std::string_view text) {
  errno = 0;
  std::cout << text;
  flush_stdout();
}

// A file the command reads, by identity (device and inode, symbolic links and other
// names resolved), so that an output naming it under any name is refused before it can
// overwrite what was read. Only regular files: /dev/null as input and output is fine.
struct InputFile {
  std::string what;  // "the scenario", "the trace", "the configuration"
  std::string path;  // as given ("-": standard input)
  dev_t dev = 0;
  ino_t ino = 0;
};

std::optional<InputFile> input_file(std::string what, const std::string& path) {
  struct stat st {};
  const int rc = path == "-" ? ::fstat(STDIN_FILENO, &st) : ::stat(path.c_str(), &st);
  if (rc != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  return InputFile{std::move(what), path, st.st_dev, st.st_ino};
}

bool is_file(int fd, const InputFile& in) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_dev == in.dev && st.st_ino == in.ino;
}

std::string input_name(const InputFile& in) {
  return in.what + " " +
         (in.path == "-" ? std::string("(standard input)")
                         : bulwark::lab::quote_for_error(in.path));
}

// Standard output must not be an input either (`bulwark replay ... >> trace.csv`).
void check_stdout_is_not(const std::vector<std::optional<InputFile>>& inputs) {
  for (const auto& in : inputs) {
    if (in && is_file(STDOUT_FILENO, *in)) {
      throw InputError({}, "",
                       "standard output is " + input_name(*in) +
                           ", which this command reads: writing there would overwrite it; "
                           "redirect the output to another file");
    }
  }
}

void check_simulate(SimulateArgs& a) {
  if (a.print_scenario) {
    // It prints the built-in scenario and nothing else: anything more asked for is a
    // mistake, not something to ignore (`simulate mine.toml --print-scenario`).
    const char* other = a.scenario.given        ? "SCENARIO file"
                        : a.json.given          ? "--json"
                        : a.svg.given           ? "--svg"
                        : a.duration.given      ? "--duration"
                        : a.timeline_step.given ? "--timeline-step"
                        : !a.only.empty()       ? "--only"
                        : a.seed                ? "--seed"
                        : a.no_timeline         ? "--no-timeline"
                                                : nullptr;
    if (other != nullptr) {
      throw InputError(
          {}, "--print-scenario",
          std::string("prints the built-in scenario and runs nothing, so it takes no ") + other +
              " (to run a file, leave --print-scenario out)");
    }
    return;
  }
  if (a.builtin.given && (a.scenario.given || a.fleet)) {
    throw InputError({}, "--builtin",
                     std::string("picks a built-in scenario, so it takes no ") +
                         (a.fleet ? "--fleet" : "SCENARIO file"));
  }
  if (a.fleet && !a.only.empty()) {
    throw InputError({}, "--only",
                     "does not apply to --fleet: the [fleet] table's configurations key picks "
                     "what runs as a fleet");
  }
  if (a.fleet && a.timeline_step.given) {
    throw InputError({}, "--timeline-step",
                     "does not apply to --fleet: a fleet's report has no timeline");
  }
  if (a.scenario.given) check_path("SCENARIO", a.scenario.value);
  for (std::size_t i = 0; i < a.only.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (a.only[i] == a.only[j]) {
        // Each --only runs its configuration once more: a name twice is a mistake, and
        // a thousand times would be a thousand runs.
        throw InputError({}, "--only",
                         "names " + bulwark::lab::quote_for_error(a.only[i]) + " twice");
      }
    }
  }
  check_output("--json", a.json);
  check_output("--svg", a.svg);
  if (a.json.value == "-" && a.svg.value == "-") {
    throw InputError({}, "--svg", "only one of --json and --svg can write to standard output");
  }
  if (a.json.given && a.svg.given && a.json.value != "-" && a.json.value == a.svg.value) {
    throw InputError(
        {}, "--svg",
        "names the same file as --json (" + bulwark::lab::quote_for_error(a.svg.value) + ")");
  }
  auto step = bulwark::lab::parse_duration(a.timeline_step.value);
  if (!step) throw InputError({}, "--timeline-step", step.error());
  if (*step <= bulwark::Nanos::zero()) throw InputError({}, "--timeline-step", "must be positive");
  a.step = *step;
  if (a.duration.given) {
    auto d = bulwark::lab::parse_duration(a.duration.value);
    if (!d) throw InputError({}, "--duration", d.error());
    if (*d <= bulwark::Nanos::zero() || *d > bulwark::lab::kMaxScenarioDuration) {
      throw InputError({}, "--duration", "must be positive and at most 30 days");
    }
    a.duration_value = *d;
  }
}

void check_replay(const ReplayArgs& a) {
  check_path("--config", a.config);
  check_path("TRACE", a.trace);
  if (a.config == "-" && a.trace == "-") {
    throw InputError({}, "--config",
                     "the configuration and the trace cannot both be read from standard input "
                     "('-'): give one of them as a file");
  }
}

void check_calibrate(CalibrateArgs& a) {
  check_path("TRACE", a.trace);
  for (const std::string& k : a.keys) {
    if (std::count(a.keys.begin(), a.keys.end(), k) > 1) {
      throw InputError({}, "--key", "names " + bulwark::lab::quote_for_error(k) + " twice");
    }
  }
  const std::string& v = a.false_opens_per_day.value;
  double n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size() || !(n > 0) || n > 1e6) {
    throw InputError(
        {}, "--false-opens-per-day",
        "expected a number above 0 and at most 1000000, got " + bulwark::lab::quote_for_error(v));
  }
  a.false_opens = n;
  check_output("--json", a.json);
  check_output("--svg", a.svg);
  check_output("--toml", a.toml);
  check_output("--scenario", a.scenario);
  const Given* outs[] = {&a.json, &a.svg, &a.toml, &a.scenario};
  const char* flags[] = {"--json", "--svg", "--toml", "--scenario"};
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < i; ++j) {
      if (outs[i]->given && outs[j]->given && outs[i]->value == outs[j]->value) {
        throw InputError({}, flags[i],
                         outs[i]->value == "-"
                             ? std::string("only one of --json, --svg, --toml and --scenario can "
                                           "write to "
                                           "standard output")
                             : std::string("names the same file as ") + flags[j]);
      }
    }
  }
}

// An output the command writes: standard output ("-") or a file. Files are opened
// before anything runs, so an unwritable path fails before any work and before anything
// is printed; an existing file is only truncated when its new content is written, and a
// file this command created is removed again if the command fails before writing it.
class Output {
 public:
  // `path` has passed check_output().
  Output(std::string flag, const Given& path) : flag_(std::move(flag)), path_(path.value) {}
  // True if this and `other` are the same file (./a.json and a.json), once both are open.
  bool same_file_as(const Output& other) const {
    struct stat a {
    }, b{};
    return file_ && other.file_ && ::fstat(::fileno(file_.get()), &a) == 0 &&
           ::fstat(::fileno(other.file_.get()), &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino && S_ISREG(a.st_mode);
  }
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;
  ~Output() {
    file_.reset();
    if (created_ && !written_) std::remove(path_.c_str());
  }

  void open() {
    if (path_.empty() || path_ == "-") return;
    int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      created_ = true;
    } else if (errno == EEXIST) {
      fd = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
    }
    if (fd >= 0) {
      file_.reset(::fdopen(fd, "wb"));
      if (!file_) ::close(fd);
    }
    if (!file_) {
      throw std::runtime_error(flag_ + ": cannot open " + bulwark::lab::printable(path_) +
                               " for writing: " + std::strerror(errno));
    }
  }
  // Refuses (exit 2) an output that is one of the command's inputs, once open: the
  // file is opened without truncating it, so nothing has been overwritten yet.
  void check_not(const std::vector<std::optional<InputFile>>& inputs) const {
    for (const auto& in : inputs) {
      if (in && file_ && is_file(::fileno(file_.get()), *in)) {
        throw InputError({}, flag_,
                         "names " + input_name(*in) +
                             ", which this command reads: writing it would overwrite what was "
                             "read; name another file");
      }
    }
  }
  bool used() const { return !path_.empty(); }
  bool is_stdout() const { return path_ == "-"; }
  const std::string& path() const { return path_; }

  void write(const std::string& content) {
    if (is_stdout()) return write_stdout(content);
    std::FILE* f = file_.release();
    int err = 0;
    // A pipe or a terminal (--json /dev/stdout) cannot be truncated, and needs not be.
    if (::ftruncate(::fileno(f), 0) != 0 && errno != EINVAL) err = errno;
    if (std::fwrite(content.data(), 1, content.size(), f) != content.size() && err == 0) {
      err = errno != 0 ? errno : EIO;
    }
    // The data reaches the file when it is flushed: a full disk shows here.
    if (std::fclose(f) != 0 && err == 0) err = errno != 0 ? errno : EIO;
    written_ = true;
    if (err != 0) {
      throw std::runtime_error(flag_ + ": cannot write " + bulwark::lab::printable(path_) + ": " +
                               std::strerror(err));
    }
  }

 private:
  struct FileCloser {
    void operator()(std::FILE* f) const noexcept {
      if (f != nullptr) std::fclose(f);
    }
  };
  std::string flag_;
  std::string path_;
  std::unique_ptr<std::FILE, FileCloser> file_;
  bool created_ = false;
  bool written_ = false;
};

// --seed and --duration over the scenario's own, held to the bound its own duration was
// held to when it was read: the run's estimated work (check_work).
void apply_seed_and_duration(const SimulateArgs& a, bulwark::lab::Scenario& scenario) {
  if (a.seed) scenario.seed = *a.seed;
  if (!a.duration_value) return;
  if (scenario.fleet) {
    for (const auto& o : scenario.fleet->outages) {
      if (o.start >= *a.duration_value) {
        throw InputError({}, "--duration",
                         "ends before the store outage at " +
                             bulwark::lab::format_duration(o.start) + " starts");
      }
    }
  }
  scenario.duration = *a.duration_value;
  // The longer run must still end while the user waits (a fleet's runs, as a fleet).
  bulwark::lab::check_work(scenario, scenario.fleet.has_value(), "--duration");
}

// simulate's --json and --svg, opened before the run so that a bad path fails at once.
void open_outputs(const SimulateArgs& a, Output& json, Output& svg) {
  json.open();
  svg.open();
  // The scenario read must not be overwritten (`simulate mine.toml --json mine.toml`).
  const std::vector<std::optional<InputFile>> inputs{
      a.scenario.given ? input_file("the scenario", a.scenario.value) : std::nullopt};
  json.check_not(inputs);
  svg.check_not(inputs);
  check_stdout_is_not(inputs);
  if (json.same_file_as(svg)) {
    throw InputError(
        {}, "--svg",
        "names the same file as --json (" + bulwark::lab::quote_for_error(a.svg.value) + ")");
  }
}

// simulate's results: JSON and SVG where asked, and the text report on stdout unless
// one of them went there, naming the files written.
template <class Json, class Svg, class Text>
void write_outputs(const SimulateArgs& a, Output& json, Output& svg, Json to_json, Svg to_svg,
                   Text write_text) {
  if (json.used()) json.write(to_json());
  if (svg.used()) svg.write(to_svg());
  if (json.is_stdout() || svg.is_stdout()) return;
  std::ostringstream text;
  write_text(text);
  if (json.used()) {
    text << "\nResults written to " << bulwark::lab::printable(a.json.value) << "\n";
  }
  if (svg.used()) {
    text << (json.used() ? "" : "\n") << "Chart written to " << bulwark::lab::printable(a.svg.value)
         << "\n";
  }
  write_stdout(text.str());
}

// A scenario with a [fleet] table: single, isolated and shared, side by side.
int run_fleet(const SimulateArgs& a, bulwark::lab::Scenario& scenario, Output& json, Output& svg) {
  if (!a.only.empty()) {
    throw InputError({}, "--only",
                     "does not apply to a fleet scenario: the [fleet] table's configurations "
                     "key picks what runs as a fleet");
  }
  if (a.timeline_step.given) {
    throw InputError({}, "--timeline-step",
                     "does not apply to a fleet scenario: a fleet's report has no timeline");
  }
  apply_seed_and_duration(a, scenario);
  open_outputs(a, json, svg);
  const bulwark::lab::FleetSimulationResult result = bulwark::lab::simulate_fleet(scenario);
  write_outputs(
      a, json, svg, [&] { return bulwark::lab::fleet_to_json(result); },
      [&] { return bulwark::lab::fleet_to_svg(result); },
      [&](std::ostream& out) { bulwark::lab::write_fleet_text(out, result); });
  return 0;
}

// A progress line on standard error, for a run longer than a second, only on a
// terminal: rows read so far, overwritten in place, and cleared at the end.
struct Progress {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  bool shown = false;
  static void report(std::uint64_t rows, std::uint64_t of, void* self) {
    auto& p = *static_cast<Progress*>(self);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - p.start).count();
    if (s < 1) return;
    if (of == 0) {
      std::fprintf(stderr, "\rreading: %llu rows (%.1fs)", static_cast<unsigned long long>(rows),
                   s);
    } else {
      std::fprintf(stderr, "\rchecking the proposal: %llu of %llu rows (%.1fs)\033[K",
                   static_cast<unsigned long long>(rows), static_cast<unsigned long long>(of), s);
    }
    std::fflush(stderr);
    p.shown = true;
  }
  // For simulate: the configuration and how far its virtual time has come.
  static void simulating(std::string_view configuration, bulwark::Nanos at, bulwark::Nanos duration,
                         void* self) {
    auto& p = *static_cast<Progress*>(self);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - p.start).count();
    if (s < 1) return;
    const double done = duration.count() > 0 ? 100.0 * static_cast<double>(at.count()) /
                                                   static_cast<double>(duration.count())
                                             : 100.0;
    std::fprintf(stderr, "\rsimulating %s: %.0f%% of %s (%.1fs)\033[K",
                 bulwark::lab::printable(configuration).c_str(), done,
                 bulwark::lab::format_duration(duration).c_str(), s);
    std::fflush(stderr);
    p.shown = true;
  }
  // Clears the line (before output that may go to the same terminal).
  void clear() {
    if (shown) std::fputs("\r\033[K", stderr);
    shown = false;
  }
  ~Progress() { clear(); }
};

int run_simulate(const SimulateArgs& a) {
  if (a.print_scenario) {
    if (a.builtin.given) {
      bulwark::lab::builtin_scenario(a.builtin.value);  // an unknown name: the error
      write_stdout(bulwark::lab::builtin_scenario_toml(a.builtin.value));
      return 0;
    }
    write_stdout(a.fleet ? bulwark::lab::builtin_fleet_scenario_toml()
                         : bulwark::lab::builtin_scenario_toml());
    return 0;
  }
  Output json("--json", a.json), svg("--svg", a.svg);
  bulwark::lab::Scenario scenario =
      a.scenario.given  ? bulwark::lab::load_scenario_file(a.scenario.value)
      : a.builtin.given ? bulwark::lab::builtin_scenario(a.builtin.value)
      : a.fleet         ? bulwark::lab::builtin_fleet_scenario()
                        : bulwark::lab::builtin_scenario();
  if (scenario.fleet) return run_fleet(a, scenario, json, svg);
  if (a.fleet) {
    throw InputError({scenario.source}, "--fleet",
                     "the scenario has no [fleet] table (docs/lab.md: \"A fleet\"); to run "
                     "the built-in fleet, leave the SCENARIO file out");
  }
  apply_seed_and_duration(a, scenario);
  if (scenario.duration / a.step > kMaxTimelineRows) {
    // Blame what the user wrote: the step if given, else the duration that made it long.
    const std::string rows = "makes more than 1000000 timeline rows of " +
                             bulwark::lab::format_duration(a.step) + " in " +
                             bulwark::lab::format_duration(scenario.duration);
    const bulwark::Nanos least((scenario.duration.count() + kMaxTimelineRows - 1) /
                               kMaxTimelineRows);
    const std::string hint =
        ": give a --timeline-step of at least " + bulwark::lab::format_duration(least);
    if (a.timeline_step.given) throw InputError({}, "--timeline-step", rows + hint);
    if (a.duration.given) throw InputError({}, "--duration", rows + hint);
    throw InputError({scenario.source}, "duration", rows + " (the default --timeline-step)" + hint);
  }
  if (!a.only.empty()) {
    std::vector<bulwark::lab::ResilienceConfig> kept;
    for (const std::string& name : a.only) {
      bool found = false;
      for (const auto& c : scenario.configurations) {
        if (c.name == name) kept.push_back(c), found = true;
      }
      if (!found) {
        std::string names;
        for (const auto& c : scenario.configurations) {
          names += (names.empty() ? "" : ", ") + bulwark::lab::escape_for_error(c.name);
        }
        throw InputError({}, "--only",
                         "no configuration named " + bulwark::lab::quote_for_error(name) +
                             " (the scenario has " + names + ")");
      }
    }
    scenario.configurations = std::move(kept);
  }
  open_outputs(a, json, svg);
  // The configurations are independent: one thread each, up to the machine's cores.
  bulwark::lab::SimulateOptions options{
      .timeline_step = a.step, .threads = std::max(1u, std::thread::hardware_concurrency())};
  Progress progress;
  if (::isatty(::fileno(stderr))) {
    options.progress = &Progress::simulating;
    options.progress_context = &progress;
  }
  const bulwark::lab::SimulationResult result = bulwark::lab::simulate(scenario, options);
  progress.clear();
  write_outputs(
      a, json, svg, [&] { return bulwark::lab::to_json(result); },
      [&] { return bulwark::lab::to_svg(result); },
      [&](std::ostream& out) {
        bulwark::lab::write_text(out, result, {.timeline = !a.no_timeline});
      });
  return 0;
}

int run_replay(const ReplayArgs& a) {
  check_stdout_is_not(
      {input_file("the configuration", a.config), input_file("the trace", a.trace)});
  const bulwark::lab::BreakerSpec spec = bulwark::lab::load_breaker_file(a.config);
  bulwark::lab::ReplayOptions options{.decisions = a.decisions};
  Progress progress;
  if (::isatty(::fileno(stderr))) {
    options.progress = [](std::uint64_t rows, bool done, void* p) {
      if (done) return static_cast<Progress*>(p)->clear();
      Progress::report(rows, 0, p);
    };
    options.progress_context = &progress;
  }
  bulwark::lab::replay_file(spec, a.trace, stdout, options);
  return 0;
}

int run_calibrate(const CalibrateArgs& a) {
  Output json("--json", a.json), svg("--svg", a.svg), toml("--toml", a.toml),
      scenario("--scenario", a.scenario);
  json.open();
  svg.open();
  toml.open();
  scenario.open();
  for (const auto& [one, other, flag] : {std::tuple{&json, &svg, "--svg"},
                                         {&json, &toml, "--toml"},
                                         {&svg, &toml, "--toml"},
                                         {&json, &scenario, "--scenario"},
                                         {&svg, &scenario, "--scenario"},
                                         {&toml, &scenario, "--scenario"}}) {
    if (one->same_file_as(*other)) {
      throw InputError({}, flag, "names the same file as another output");
    }
  }
  const std::vector<std::optional<InputFile>> inputs{input_file("the trace", a.trace)};
  for (const Output* out : {&json, &svg, &toml, &scenario}) out->check_not(inputs);
  check_stdout_is_not(inputs);
  bulwark::lab::CalibrateOptions options;
  options.false_opens_per_day = a.false_opens;
  options.keys = a.keys;
  Progress progress;
  if (::isatty(::fileno(stderr))) {
    options.progress = &Progress::report;
    options.progress_context = &progress;
  }
  const bulwark::lab::Calibration c = bulwark::lab::calibrate_file(a.trace, options);
  if ((toml.used() || scenario.used()) && c.keys.size() != 1) {
    std::string names;
    for (std::size_t i = 0; i < c.keys.size() && i < 5; ++i) {
      names += (i ? ", " : "") + bulwark::lab::quote_for_error(c.keys[i].key);
    }
    throw InputError({}, toml.used() ? "--toml" : "--scenario",
                     "writes one key's configuration (replay shares one configuration across "
                     "keys), and the trace has " +
                         std::to_string(c.keys.size()) + " keys (" + names +
                         (c.keys.size() > 5 ? ", ..." : "") + "): pick one with --key");
  }
  if (json.used()) json.write(bulwark::lab::to_json(c));
  if (svg.used()) svg.write(bulwark::lab::to_svg(c));
  if (toml.used()) toml.write(c.keys.front().breaker_toml);
  if (scenario.used()) scenario.write(c.keys.front().scenario_toml);
  if (!json.is_stdout() && !svg.is_stdout() && !toml.is_stdout() && !scenario.is_stdout()) {
    std::string text = bulwark::lab::to_text(c);
    if (json.used()) text += "\nResults written to " + bulwark::lab::printable(a.json.value) + "\n";
    if (svg.used()) text += "Chart written to " + bulwark::lab::printable(a.svg.value) + "\n";
    // A key whose trace is not normal traffic gets no configuration: its files say why.
    const bool proposed = c.keys.size() == 1 && c.keys.front().not_normal.empty();
    if (toml.used()) {
      text += (proposed ? "Breaker configuration written to "
                        : "No breaker configuration proposed (not normal traffic); why, written "
                          "to ") +
              bulwark::lab::printable(a.toml.value) + "\n";
    }
    if (scenario.used()) {
      text += (proposed ? "Scenario written to "
                        : "No scenario written (not normal traffic); why, written to ") +
              bulwark::lab::printable(a.scenario.value) + "\n";
    }
    write_stdout(text);
  }
  return 0;
}

}  // namespace

CommandLine::CommandLine() {
  app_ = std::make_unique<CLI::App>(
      "bulwark: the resilience lab. Runs bulwark's real circuit breaker, bulkhead, retry and\n"
      "retry budget in virtual time: simulate an incident, replay a recorded trace, or\n"
      "calibrate a configuration from one.\n"
      "Configuration reference: docs/configuration.md",
      "bulwark");
  CLI::App& app = *app_;
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("bulwark lab ") + bulwark::version());

  SimulateArgs& sim = command_.sim;
  simulate_ = app.add_subcommand(
      "simulate",
      "Simulate a scenario's traffic through each of its resilience configurations, in\n"
      "virtual time, and compare them side by side. With no SCENARIO, runs the built-in\n"
      "hotel-reviews incident (a reviews service goes from 120 ms to 14 s) before and after\n"
      "its fixes.");
  simulate_
      ->add_option("scenario", sim.scenario.value,
                   "Scenario file (TOML; '-': stdin); default: the built-in incident")
      ->type_name("SCENARIO.toml");
  simulate_
      ->add_option("--json", sim.json.value, "Write machine-readable results to FILE ('-': stdout)")
      ->type_name("FILE");
  simulate_->add_option("--svg", sim.svg.value, "Write a chart of the run to FILE ('-': stdout)")
      ->type_name("FILE");
  simulate_->add_option("--seed", sim.seed, "Override the scenario's random seed")
      ->type_name("N")
      ->check(CLI::Validator(
          [](const std::string& v) -> std::string {
            std::uint64_t n = 0;
            const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
            if (ec != std::errc() || end != v.data() + v.size()) {
              return "must be a whole number from 0 to 18446744073709551615 (got " +
                     bulwark::lab::quote_for_error(v) + ")";
            }
            return "";
          },
          ""));
  simulate_
      ->add_option("--duration", sim.duration.value,
                   "Override the scenario's duration, e.g. 2min (the phases keep their starts)")
      ->type_name("DURATION");
  simulate_
      ->add_option("--timeline-step", sim.timeline_step.value,
                   "Width of a timeline row, e.g. 1s, 10s, 1min (default 1s)")
      ->type_name("DURATION");
  simulate_
      ->add_option("--only", sim.only,
                   "Run only this configuration; one NAME per flag, repeat it for more\n"
                   "(--only before --only after)")
      ->type_name("NAME")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  simulate_->add_flag("--no-timeline", sim.no_timeline, "Print the summary without the timeline");
  simulate_->add_flag("--print-scenario", sim.print_scenario,
                      "Print the built-in scenario's TOML (a starting point) and exit");
  simulate_
      ->add_option("--builtin", sim.builtin.value,
                   "Run (or with --print-scenario print) a built-in scenario: incident (the\n"
                   "default), overload (traffic past a server's capacity) or retry-storm (a\n"
                   "30 s trigger that unbudgeted retries keep going)")
      ->type_name("NAME");
  simulate_->add_flag("--fleet", sim.fleet,
                      "Run the built-in fleet scenario: the incident over 100 instances, single,\n"
                      "isolated and sharing breaker decisions (a SCENARIO with a [fleet] table\n"
                      "runs as a fleet without it)");

  ReplayArgs& rep = command_.rep;
  CLI::App* replay = app.add_subcommand(
      "replay",
      "Replay a recorded call trace through one breaker per key, in trace time, to check a\n"
      "breaker configuration against real traffic before enforcing it. TRACE.csv has the\n"
      "header t_ms,key,duration_ms,outcome (outcome: success, failure or ignored; rows in\n"
      "non-decreasing t_ms). Writes JSON Lines: one line per transition, with --decisions\n"
      "one per call, and a summary line per key.");
  replay->add_option("--config", rep.config, "Breaker configuration (TOML with a [breaker] table)")
      ->type_name("BREAKER.toml")
      ->required();
  replay->add_option("trace", rep.trace, "Call trace (CSV; '-': standard input)")
      ->type_name("TRACE.csv")
      ->required();
  replay->add_flag("--decisions", rep.decisions,
                   "Also write one line per call: permitted or rejected");

  CalibrateArgs& cal = command_.cal;
  calibrate_ = app.add_subcommand(
      "calibrate",
      "Propose a configuration from a recorded trace (the format replay reads): per key, the\n"
      "normal rate, error rate and latency, and a timeout, slow-call threshold, failure and\n"
      "slow-call rates, window, open and half-open settings and a bulkhead size, each with its\n"
      "reason; then the proposal replayed on the trace and on injected degradations.");
  calibrate_->add_option("trace", cal.trace, "Call trace (CSV; '-': standard input)")
      ->type_name("TRACE.csv")
      ->required();
  calibrate_
      ->add_option("--false-opens-per-day", cal.false_opens_per_day.value,
                   "The false-open budget per key the rate margins are sized for (default 1)")
      ->type_name("N");
  calibrate_
      ->add_option("--json", cal.json.value, "Write machine-readable results to FILE ('-': stdout)")
      ->type_name("FILE");
  calibrate_
      ->add_option("--svg", cal.svg.value, "Write a chart of the latencies to FILE ('-': stdout)")
      ->type_name("FILE");
  calibrate_
      ->add_option("--toml", cal.toml.value,
                   "Write the proposal as a breaker file (replay --config) to FILE ('-': stdout);\n"
                   "needs a single key (see --key)")
      ->type_name("FILE");
  calibrate_
      ->add_option(
          "--scenario", cal.scenario.value,
          "Write a scenario for simulate to FILE ('-': stdout): the key's traffic, its\n"
          "latency x10 for 6 minutes, unprotected and with the proposal; needs a single key")
      ->type_name("FILE");
  calibrate_
      ->add_option("--key", cal.keys, "Calibrate only this key; one K per flag, repeat it for more")
      ->type_name("K")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
#if defined(BULWARK_CLI_DEMO)
  // `bulwark demo`: no options; the run and its table are demo.h's.
  demo_ = app.add_subcommand(
      "demo",
      "Run the hotel-reviews incident live on 127.0.0.1 (about 30 s): a reviews upstream\n"
      "degrades from 12 ms to 1.4 s without errors while pages call it through\n"
      "bulwark::http, before (a long timeout) and after (timeout, slow-call breaker,\n"
      "bulkhead, fallback). Prints a before/after table.");
#endif
}

CommandLine::~CommandLine() = default;

Command CommandLine::parse(int argc, const char* const* argv) {
  // CLI11 would only say "A subcommand is required" for a misspelt one.
  if (argc > 1 && argv[1][0] != '-' && std::string_view(argv[1]) != "simulate" &&
      std::string_view(argv[1]) != "replay" && std::string_view(argv[1]) != "calibrate" &&
      std::string_view(argv[1]) != "demo") {
    throw InputError({}, "",
                     "unknown subcommand " + bulwark::lab::quote_for_error(argv[1]) +
                         " (the subcommands are simulate, replay, calibrate and demo)");
  }
  app_->parse(argc, argv);
  SimulateArgs& sim = command_.sim;
  for (auto [option, given] : {std::pair{"scenario", &sim.scenario},
                               {"--json", &sim.json},
                               {"--svg", &sim.svg},
                               {"--duration", &sim.duration},
                               {"--timeline-step", &sim.timeline_step},
                               {"--builtin", &sim.builtin}}) {
    given->given = simulate_->get_option(option)->count() > 0;
  }
  CalibrateArgs& cal = command_.cal;
  for (auto [option, given] : {std::pair{"--false-opens-per-day", &cal.false_opens_per_day},
                               {"--json", &cal.json},
                               {"--svg", &cal.svg},
                               {"--toml", &cal.toml},
                               {"--scenario", &cal.scenario}}) {
    given->given = calibrate_->get_option(option)->count() > 0;
  }
  command_.simulate = simulate_->parsed();
  command_.calibrate = calibrate_->parsed();
  command_.demo = demo_ != nullptr && demo_->parsed();
  if (command_.demo) return command_;
  if (command_.simulate) {
    check_simulate(command_.sim);
  } else if (command_.calibrate) {
    check_calibrate(command_.cal);
  } else {
    check_replay(command_.rep);
  }
  return command_;
}

int CommandLine::exit(const CLI::ParseError& e) { return app_->exit(e); }

int main(int argc, const char* const* argv) {
  CommandLine line;
  Command command;
  // Everything a command writes to standard output is flushed and checked before it
  // exits 0: a failed write is exit 1 with the reason.
  const auto finish = [](int status) {
    try {
      flush_stdout();
    } catch (const std::exception& e) {
      std::cerr << "bulwark: error: " << bulwark::lab::printable(e.what()) << "\n";
      return status == 0 ? kFailed : status;
    }
    return status;
  };
  try {
    command = line.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return finish(line.exit(e));  // --help, --version
    std::cerr << "bulwark: error: " << bulwark::lab::printable(e.what()) << "\n"
              << "Run 'bulwark --help' or 'bulwark <subcommand> --help' for usage.\n";
    return kBadInput;
  } catch (const InputError& e) {
    std::cerr << "bulwark: error: " << bulwark::lab::printable(e.what()) << "\n"
              << "Run 'bulwark --help' for usage.\n";
    return kBadInput;
  }
  try {
#if defined(BULWARK_CLI_DEMO)
    if (command.demo) return finish(run_demo(DemoOptions{}, std::cout));
#endif
    if (command.simulate) return finish(run_simulate(command.sim));
    if (command.calibrate) return finish(run_calibrate(command.cal));
    return finish(run_replay(command.rep));
  } catch (const InputError& e) {
    std::cout.flush();
    std::cerr << "bulwark: error: " << bulwark::lab::printable(e.what()) << "\n";
    return kBadInput;
  } catch (const std::exception& e) {
    std::cerr << "bulwark: error: " << bulwark::lab::printable(e.what()) << "\n";
    return kFailed;
  }
}

}  // namespace bulwark::cli
