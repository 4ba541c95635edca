// The lab's promise on bad input — a clear error and exit 2, never a crash, a hang, a
// silent accept, a raw control byte on the terminal or memory without bound — held
// against the inputs that once broke it: deep TOML, unbounded values, empty options,
// bare carriage returns, escape sequences in names, huge keys, a new key on every row.
// Each test failed before its fix (a crash, a hang, exit 0, or the wrong message).

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "bulwark/lab/config.h"
#include "bulwark/lab/fleet.h"
#include "bulwark/lab/input_error.h"
#include "bulwark/lab/replay.h"
#include "bulwark/lab/report.h"
#include "bulwark/lab/simulate.h"
#include "process.h"

namespace bulwark::lab {
namespace {

using namespace std::chrono_literals;
using bulwark::testing::CliRun;
using bulwark::testing::run;
using bulwark::testing::source_path;
using bulwark::testing::temp_path;

// A scenario that runs in no time: 10 s at 10 req/s.
constexpr const char* kScenario = R"(duration = "10s"
[arrivals]
rate = 10
[caller]
workers = 5
[dependency]
[[dependency.phases]]
start = "0s"
latency = "10ms"
)";

std::string write_temp(const char* what, const std::string& content) {
  const std::string path = temp_path(what);
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

// The error's text, or "" if there was none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

void expect_exit_2(const CliRun& r, const std::string& says) {
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
}

// --- a crash: TOML nested past the stack -------------------------------------------

std::string dotted(int levels) {
  std::string key = "a";
  for (int i = 1; i < levels; ++i) key += ".a";
  return key;
}

TEST(DeepToml, FortyThousandLevelsAreRefusedBeforeParsing) {
  // 80 KB each: toml++ recursed once per level and overflowed the stack.
  const std::string key_levels = "[breaker]\n" + dotted(40'000) + " = 1\n";
  const std::string header_levels = "[" + dotted(40'000) + "]\n";
  const std::string array_headers = "[[" + dotted(40'000) + "]]\n";
  for (const std::string& toml : {key_levels, header_levels, array_headers}) {
    const std::string e = error_of([&] { (void)parse_breaker(toml, "b.toml"); });
    EXPECT_NE(e.find("more than 32 levels deep"), std::string::npos) << e;
    const std::string s = error_of([&] { (void)parse_scenario(kScenario + toml, "s.toml"); });
    EXPECT_NE(s.find("more than 32 levels deep"), std::string::npos) << s;
  }
  EXPECT_NE(error_of([&] { (void)parse_breaker(key_levels, "b.toml"); }).find("b.toml:2:"),
            std::string::npos)
      << "the line where it gets too deep";
}

TEST(DeepToml, LevelsAddUpAcrossHeadersKeysAndValues) {
  // 20 header levels + 20 key levels: each alone is fine, together too deep.
  const std::string toml = "[" + dotted(20) + "]\n" + dotted(20) + " = 1\n";
  EXPECT_NE(error_of([&] { (void)parse_breaker(toml, "b.toml"); }).find("levels deep"),
            std::string::npos);
  const std::string arrays = "[breaker]\nx = " + std::string(40, '[') + std::string(40, ']');
  EXPECT_NE(error_of([&] { (void)parse_breaker(arrays, "b.toml"); }).find("levels deep"),
            std::string::npos);
  // Dots in strings, comments and numbers are not levels.
  const std::string fine =
      "[breaker] # a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a\n"
      "name = \"" +
      dotted(40) + "\"\nkind = 'count'\nfailure_rate = 0.5\n";
  EXPECT_EQ(parse_breaker(fine, "b.toml").name(), dotted(40));
  // A shallow path is judged on its keys, as before.
  EXPECT_NE(error_of([&] {
              (void)parse_breaker("[breaker]\n" + dotted(10) + " = 1\n", "b");
            }).find("unknown key \"a\""),
            std::string::npos);
}

TEST(DeepToml, TheCliAnswersExitTwoOnBothCommands) {
  const std::string deep = write_temp("deep", "[breaker]\n" + dotted(40'000) + " = 1\n");
  const std::string header = write_temp("header", "[" + dotted(40'000) + "]\n");
  expect_exit_2(run({"replay", "--config", deep, source_path("tools/examples/trace.csv")}),
                "levels deep");
  expect_exit_2(run({"simulate", header}), "levels deep");
  expect_exit_2(run({"simulate", "-"}, kScenario + ("[" + dotted(40'000) + "]\n")), "levels deep");
  std::remove(deep.c_str());
  std::remove(header.c_str());
}

TEST(LargeToml, AFileOverOneMebibyteIsRefused) {
  const std::string big = "[breaker]\n# " + std::string(kMaxTomlBytes, 'x') + "\n";
  EXPECT_NE(error_of([&] { (void)parse_breaker(big, "b.toml"); }).find("larger than 1 MiB"),
            std::string::npos);
  expect_exit_2(run({"replay", "--config", "-", source_path("tools/examples/trace.csv")}, big),
                "<stdin>: is larger than 1 MiB");
}

// --- a hang: values without a real bound ---------------------------------------------

TEST(Bounds, AlwaysFailingRetriesWithFourBillionAttemptsAreRefused) {
  // Ran for hours: every attempt failed, and 4294967295 of them, 1 ns apart, per request.
  const std::string toml = std::string(kScenario) +
                           "error_rate = 1.0\n[config.a.retry]\nmax_attempts = 4294967295\n"
                           "[config.a.retry.backoff]\nkind = \"constant\"\ndelay = \"1ns\"\n";
  const std::string e = error_of([&] { (void)parse_scenario(toml, "s.toml"); });
  EXPECT_NE(e.find("s.toml:12:16: config.a.retry.max_attempts: must be at most 100 (got "
                   "4294967295)"),
            std::string::npos)
      << e;
  const CliRun r = run({"simulate", "-"}, toml);
  expect_exit_2(r, "must be at most 100");
}

TEST(Bounds, TheSimulatorBoundsAttemptsPerRequestAndInAll) {
  // Built in code, past the file's checks: the simulator refuses it itself.
  Scenario s = parse_scenario(std::string(kScenario) + "[config.a]\n", "s.toml");
  ResilienceConfig c = s.configurations.front();
  c.retry.emplace();
  c.retry->config.max_attempts = 1'000'000;
  EXPECT_NE(error_of([&] {
              (void)simulate_configuration(s, c);
            }).find("config.a.retry.max_attempts: must be at most 100"),
            std::string::npos);
  // Past the run bound, the simulator refuses a scenario built in code too.
  Scenario storm = parse_scenario(std::string(kScenario) + "[config.a]\n", "s.toml");
  storm.arrivals.rate = 1e6;
  storm.duration = std::chrono::hours(1);
  EXPECT_NE(error_of([&] { (void)simulate(storm); }).find("would take about"), std::string::npos);
  EXPECT_NE(error_of([&] {
              (void)simulate_configuration(storm, storm.configurations.front());
            }).find("would take about"),
            std::string::npos);
}

// A retry storm at the old cap (2e9 attempts: 20,000/s for 1,000 s, 100 attempts 1 ms
// apart) would have run for most of an hour: refused when read, with its estimate,
// naming the key most of the work comes from, at its line.
TEST(Bounds, ARetryStormIsRefusedWithItsEstimate) {
  const std::string storm =
      "duration = \"1000s\"\n[arrivals]\nrate = 20000\n[caller]\nworkers = 1000000\n"
      "[dependency]\n[[dependency.phases]]\nstart = \"0s\"\nlatency = \"1ms\"\n"
      "error_rate = 1.0\n[config.a.retry]\nmax_attempts = 100\n[config.a.retry.backoff]\n"
      "kind = \"constant\"\ndelay = \"1ms\"\n";
  const std::string e = error_of([&] { (void)parse_scenario(storm, "s.toml"); });
  EXPECT_NE(e.find("s.toml:12:16: config.a.retry.max_attempts: this scenario would take about "),
            std::string::npos)
      << e;
  EXPECT_NE(e.find(" minutes to simulate on a 2-core machine, and the lab runs at most 60 seconds"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("2e9 attempts (20000 requests/s for 1000s"), std::string::npos) << e;
  EXPECT_NE(e.find("shorten the duration, lower the rate or max_attempts"), std::string::npos) << e;
  expect_exit_2(run({"simulate", "-"}, storm), "would take about");
  // The estimate is the rule: at most the bound runs, past it does not.
  Scenario s = parse_scenario(std::string(kScenario) + "[config.a]\n", "s.toml");
  s.arrivals.rate = 1e6;
  s.caller.workers = 1000;
  const double per_second = estimate_work(s, false).seconds / 10;  // 10 s of it
  s.duration = std::chrono::milliseconds(static_cast<long>(kMaxRunSeconds / per_second * 1000));
  EXPECT_LE(estimate_work(s, false).seconds, kMaxRunSeconds);
  EXPECT_NO_THROW(check_work(s, false));
  s.duration += std::chrono::seconds(1);
  EXPECT_GT(estimate_work(s, false).seconds, kMaxRunSeconds);
  EXPECT_THROW(check_work(s, false), InputError);
  // Two configurations run side by side on two cores: twice the work, the same time.
  s.duration -= std::chrono::seconds(1);
  s.configurations.push_back(s.configurations.front());
  s.configurations.back().name = "b";
  EXPECT_NO_THROW(check_work(s, false));
  s.configurations.push_back(s.configurations.front());
  s.configurations.back().name = "c";
  EXPECT_THROW(check_work(s, false), InputError) << "three on two cores";
}

// What the lab ships and documents runs: the built-in scenarios, the examples, and the
// scenarios `bulwark calibrate` writes, however busy the key.
TEST(Bounds, TheBuiltInAndDocumentedScenariosAreWithinTheBound) {
  EXPECT_LE(estimate_work(builtin_scenario(), false).seconds, kMaxRunSeconds);
  for (const char* file : {"tools/examples/incident.toml", "tools/examples/fleet.toml"}) {
    const Scenario s = load_scenario_file(source_path(file));
    EXPECT_LE(estimate_work(s, s.fleet.has_value()).seconds, 5) << file;
  }
  EXPECT_LE(estimate_work(builtin_fleet_scenario(), true).seconds, 5);
}

struct Bound {
  const char* toml;  // a [breaker] file's body
  const char* field;
  const char* says;
};

TEST(Bounds, EveryBreakerValueHasItsRealLimitInTheError) {
  for (const Bound& b : {
           // Was told "at most 4294967295": the breaker's own limit is 65535.
           Bound{"consecutive_failures = 99999999999", "breaker.consecutive_failures",
                 "must be at most 65535 (got 99999999999)"},
           Bound{"kind = \"count\"\nwindow.size = 70000", "breaker.window.size",
                 "must be at most 65535"},
           Bound{"half_open.max_in_flight = 70000", "breaker.half_open.max_in_flight",
                 "must be at most 65535"},
           Bound{"half_open.probes = 9000", "breaker.half_open.probes", "must be at most 8191"},
           Bound{"kind = \"time\"\nminimum_calls = 2000000", "breaker.minimum_calls",
                 "must be at most 1000000"},
           Bound{"open_duration = \"400d\"", "breaker.open_duration", "unknown unit \"d\""},
           Bound{"open_duration = \"9000h\"", "breaker.open_duration",
                 "must be at most 8760h (got 9000h)"},
           Bound{"open_growth.multiplier = 1e6\nopen_growth.max = \"1h\"",
                 "breaker.open_growth.multiplier", "must be at most 1000"},
           Bound{"name = \""
                 "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
                 "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"",
                 "breaker.name", "must be at most 128 bytes long (got 137)"},
       }) {
    try {
      (void)parse_breaker(std::string("[breaker]\n") + b.toml + "\n", "b.toml");
      ADD_FAILURE() << "accepted: " << b.toml;
    } catch (const InputError& e) {
      EXPECT_EQ(e.field(), b.field) << e.what();
      EXPECT_NE(e.message().find(b.says), std::string::npos) << e.what();
    }
  }
}

TEST(Bounds, EveryScenarioValueHasALimitInTheError) {
  const std::string base = kScenario;
  struct Case {
    std::string toml;
    const char* says;
  };
  std::string many_configs = base;
  for (int i = 0; i < 17; ++i) many_configs += "[config.c" + std::to_string(i) + "]\n";
  std::string many_phases = base;
  for (int i = 1; i <= 1000; ++i) {
    many_phases +=
        "[[dependency.phases]]\nstart = \"" + std::to_string(i) + "ms\"\nlatency = \"1ms\"\n";
  }
  for (const Case& c : {
           Case{std::string(base).replace(base.find("workers = 5"), 11, "workers = 2000000") +
                    "[config.a]\n",
                "caller.workers: must be at most 1000000"},
           Case{std::string(base).replace(base.find("\"10ms\""), 6, "\"25h\"") + "[config.a]\n",
                "latency: must be at most 24h (got 25h)"},
           Case{base + "[config.a]\ntimeout = \"2d\"\n", "unknown unit"},
           Case{base + "[config.a]\ntimeout = \"25h\"\n", "config.a.timeout: must be at most 24h"},
           Case{base + "[config.a.bulkhead]\nmax_concurrent = 5000000\n",
                "config.a.bulkhead.max_concurrent: must be at most 1000000"},
           Case{base + "[config.a.retry.backoff]\nkind = \"exponential\"\nmultiplier = 1e9\n",
                "config.a.retry.backoff.multiplier: must be at most 1000"},
           Case{base + "[config.a.retry.backoff]\nkind = \"constant\"\ndelay = \"9000h\"\n",
                "config.a.retry.backoff.delay: must be at most 8760h"},
           Case{"description = \"" + std::string(2000, 'd') + "\"\n" + base + "[config.a]\n",
                "description: must be at most 1024 bytes long (got 2000)"},
           Case{base + "[config." + std::string(200, 'n') + "]\n",
                "the configuration's name must be at most 128 bytes long (got 200)"},
           Case{many_configs, "config.c16: is configuration 17: a scenario has at most 16"},
           Case{many_phases + "[config.a]\n", "dependency.phases: has more than 1000 phases"},
       }) {
    const std::string e = error_of([&] { (void)parse_scenario(c.toml, "s.toml"); });
    EXPECT_NE(e.find(c.says), std::string::npos) << "expected: " << c.says << "\ngot: " << e;
  }
}

// --- unclear errors ------------------------------------------------------------------

TEST(ClearErrors, AHugeKeyIsEchoedCutAndOnce) {
  // Was echoed whole, twice, after a did-you-mean search over all of it.
  const std::string key(500'000, 'x');
  const std::string e = error_of([&] { (void)parse_breaker("[breaker]\n" + key + " = 1\n", "b"); });
  EXPECT_LT(e.size(), 400u) << e.substr(0, 400);
  EXPECT_NE(e.find("unknown key \"xxxx"), std::string::npos) << e;
  EXPECT_NE(e.find("...\" (500000 bytes) in [breaker]"), std::string::npos) << e;
  // A near miss is still suggested.
  EXPECT_NE(error_of([&] {
              (void)parse_breaker("[breaker]\nopen_durration = \"1s\"\n", "b");
            }).find("did you mean \"open_duration\"?"),
            std::string::npos);
}

TEST(ClearErrors, EscapedTextIsCutAtACharacterBoundary) {
  EXPECT_EQ(escape_for_error(std::string(kMaxEchoed, 'a')), std::string(kMaxEchoed, 'a'));
  EXPECT_EQ(escape_for_error(std::string(kMaxEchoed + 1, 'a')),
            std::string(kMaxEchoed, 'a') + "...");
  // 99 bytes of 'a', then a 2-byte character across the cut: it goes whole or not at all.
  const std::string text = std::string(kMaxEchoed - 1, 'a') + "\xc3\xa9" + "tail";
  EXPECT_EQ(quote_for_error(text), "\"" + std::string(kMaxEchoed - 1, 'a') + "...\" (" +
                                       std::to_string(text.size()) + " bytes)");
  EXPECT_EQ(printable(std::string_view("a\x1b[31m\x07\0b\\\"\xff", 12)),
            "a\\x1b[31m\\x07\\x00b\\\"\\xff");
}

TEST(ClearErrors, RowsEndingInABareCrNameTheCr) {
  // Was "too many fields": getline() split the rows at LF only.
  BreakerSpec spec;
  const std::string e = error_of([&] {
    (void)replay_text(spec, "t_ms,key,duration_ms,outcome\n0,k,1,success\r1,k,1,success\r",
                      "t.csv");
  });
  EXPECT_NE(e.find("t.csv:2:14: holds a carriage return (\\r) that does not end the line"),
            std::string::npos)
      << e;
  EXPECT_EQ(e.find('\r'), std::string::npos);
}

TEST(ClearErrors, AKeyEndingInABareCrIsRefused) {
  // Was taken as the key "k\r".
  BreakerSpec spec;
  for (const char* csv : {"t_ms,duration_ms,outcome,key\n0,1,success,k\r\r\n",
                          "t_ms,duration_ms,outcome,key\n0,1,success,k\r",
                          "t_ms,duration_ms,outcome,key\n0,1,success,\"k\r\"\n"}) {
    const std::string e = error_of([&] { (void)replay_text(spec, csv, "t.csv"); });
    EXPECT_NE(e.find("carriage return"), std::string::npos) << e;
  }
  EXPECT_NE(replay_text(spec, "t_ms,duration_ms,outcome,key\r\n0,1,success,k\r\n", "t.csv")
                .find("{\"key\":\"k\","),
            std::string::npos)
      << "CRLF is still a line end";
}

TEST(ClearErrors, DurationBlamesWhatTheUserWrote) {
  // --duration 720h was blamed on --timeline-step, which the user had not given. (On
  // the built-in scenario 720h is refused first for its work: 2.1e9 requests.)
  expect_exit_2(run({"simulate", "--duration", "720h"}),
                "--duration: this scenario would take about 5 minutes");
  expect_exit_2(
      run({"simulate", "-", "--duration", "720h"}, std::string(kScenario) + "[config.a]\n"),
      "--duration: makes more than 1000000 timeline rows of 1s in 720h: give a "
      "--timeline-step of at least 2.592s");
  expect_exit_2(run({"simulate", "--timeline-step", "1us"}), "--timeline-step: makes more than");
  expect_exit_2(run({"simulate", "-"},
                    std::string(kScenario).replace(0, 16, "duration = \"30d\"") + "[config.a]\n"),
                "unknown unit \"d\"");
  expect_exit_2(run({"simulate", "-"},
                    std::string(kScenario).replace(0, 16, "duration = \"300h\"") + "[config.a]\n"),
                "<stdin>: duration: makes more than 1000000 timeline rows of 1s in 300h (the "
                "default --timeline-step)");
}

// --- silent accepts --------------------------------------------------------------------

TEST(SilentAccepts, EmptyFileNamesAndDurationsAreErrors) {
  // Each exited 0 doing nothing (--json "" wrote no file, --duration "" kept 10 min).
  expect_exit_2(run({"simulate", "--json", ""}), "--json: expected a file name or '-'");
  expect_exit_2(run({"simulate", "--svg", ""}), "--svg: expected a file name or '-'");
  expect_exit_2(run({"simulate", "--duration", ""}), "--duration: is empty");
  expect_exit_2(run({"simulate", "--timeline-step", ""}), "--timeline-step: is empty");
  expect_exit_2(run({"simulate", ""}), "SCENARIO: expected a file name");
  expect_exit_2(run({"replay", "--config", "", "t.csv"}), "--config: expected a file name");
  expect_exit_2(run({"replay", "--config", source_path("tools/examples/breaker.toml"), ""}),
                "TRACE: expected a file name");
}

TEST(SilentAccepts, PrintScenarioTakesNothingElse) {
  // `simulate mine.toml --print-scenario` printed the built-in scenario, ignoring the file.
  const std::string mine = write_temp("mine", std::string(kScenario) + "[config.a]\n");
  expect_exit_2(run({"simulate", mine, "--print-scenario"}),
                "--print-scenario: prints the built-in scenario and runs nothing, so it takes no "
                "SCENARIO file");
  expect_exit_2(run({"simulate", "--print-scenario", "--svg", "x.svg"}), "takes no --svg");
  const CliRun r = run({"simulate", "--print-scenario"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, std::string(builtin_scenario_toml()));
  std::remove(mine.c_str());
}

TEST(Bounds, CommandLineOverridesAreHeldToTheScenariosBounds) {
  // `--only a` a thousand times ran a thousand simulations; a longer --duration could
  // pass the worst-case attempts the file was held to.
  std::vector<std::string> args{"simulate"};
  for (int i = 0; i < 3; ++i) args.insert(args.end(), {"--only", "after"});
  expect_exit_2(run(args), "--only: names \"after\" twice");
  std::string retrying = kScenario;
  retrying.replace(retrying.find("rate = 10"), 9, "rate = 100000");
  retrying += "[config.a.retry]\nmax_attempts = 100\n";
  expect_exit_2(run({"simulate", "-", "--duration", "1h", "--timeline-step", "1min"}, retrying),
                "--duration: this scenario would take about 3 hours");
}

TEST(SilentAccepts, TheSameFileUnderTwoNamesIsOneFile) {
  const std::string dir = ::testing::TempDir();
  const std::string name = "bulwark_same_" + std::to_string(::getpid()) + ".out";
  expect_exit_2(run({"simulate", "-", "--json", dir + name, "--svg", dir + "./" + name},
                    std::string(kScenario) + "[config.a]\n"),
                "--svg: names the same file as --json");
  EXPECT_NE(::access((dir + name).c_str(), F_OK), 0) << "the file it created is removed again";
}

// --- raw control bytes ---------------------------------------------------------------

std::string hostile_scenario() {
  return "name = \"evil \\u001b[31mred\\u0007 \\u0000 end\"\n"
         "description = \"d\\u001b]0;title\\u0007 \\u009b \\uFFFF\"\n" +
         std::string(kScenario).replace(std::string(kScenario).find("[dependency]"), 12,
                                        "[dependency]\nname = \"dep\\u001b\"") +
         "[config.\"a\\u001bb\"]\ntimeout = \"1s\"\n";
}

// True if `text` holds a control byte other than a line feed.
bool has_control_bytes(const std::string& text) {
  for (unsigned char c : text) {
    if ((c < 0x20 && c != '\n') || c == 0x7F) return true;
  }
  return false;
}

TEST(ControlBytes, TheTextReportShowsThemEscaped) {
  const CliRun r = run({"simulate", "-"}, hostile_scenario());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_FALSE(has_control_bytes(r.out));
  EXPECT_EQ(r.out.find("\xc2\x9b"), std::string::npos) << "nor C1 controls (CSI)";
  EXPECT_NE(r.out.find("evil \\x1b[31mred\\x07 \\x00 end"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("d\\x1b]0;title\\x07 \\xc2\\x9b \\xef\\xbf\\xbf"), std::string::npos);
  EXPECT_NE(r.out.find("a\\x1bb"), std::string::npos);
}

TEST(ControlBytes, TheChartIsValidXmlAndTheJsonEscapesThem) {
  const SimulationResult result = simulate(parse_scenario(hostile_scenario(), "s.toml"));
  const std::string svg = to_svg(result);
  EXPECT_FALSE(has_control_bytes(svg)) << "XML 1.0 refuses them, even as &#x1b;";
  EXPECT_EQ(svg.find("\xef\xbf\xbf"), std::string::npos) << "nor U+FFFF";
  EXPECT_NE(svg.find("evil \\x1b[31mred\\x07 \\x00 end"), std::string::npos);
  EXPECT_NE(svg.find("a\\x1bb: lost"), std::string::npos);
  const std::string json = to_json(result);
  EXPECT_FALSE(has_control_bytes(json));
  EXPECT_NE(json.find("evil \\u001b[31mred\\u0007 \\u0000 end"), std::string::npos);
}

TEST(ControlBytes, ErrorsNeverPrintThem) {
  // A file name and an argument holding ESC, echoed in errors.
  const CliRun r = run({"replay", "--config", "no\x1b[2Jsuch.toml", "t.csv"});
  EXPECT_EQ(r.status, 2);
  EXPECT_FALSE(has_control_bytes(r.err)) << r.err;
  EXPECT_NE(r.err.find("no\\x1b[2Jsuch.toml"), std::string::npos) << r.err;
  const CliRun sub = run({"simul\x1b[2Jate"});
  EXPECT_EQ(sub.status, 2);
  EXPECT_FALSE(has_control_bytes(sub.err)) << sub.err;
  const CliRun seed = run({"simulate", "--seed", "1\x07"});
  EXPECT_EQ(seed.status, 2);
  EXPECT_FALSE(has_control_bytes(seed.err)) << seed.err;
}

TEST(ControlBytes, ReplayEscapesDelAndC1ControlsInKeys) {
  // Found by the trace fuzzer: a key holding DEL (or U+009B, CSI) went out raw.
  BreakerSpec spec;
  const std::string out =
      replay_text(spec, "t_ms,key,duration_ms,outcome\n0,s\x7f\xc2\x9b\x1b\xc3\xa9,1,success\n");
  EXPECT_NE(out.find("\"key\":\"s\\u007f\\u009b\\u001b\xc3\xa9\""), std::string::npos) << out;
}

// --- memory by key -------------------------------------------------------------------

TEST(KeyMemory, TooManyDistinctKeysAreRefusedBeforeAnythingIsWritten) {
  // A count window of 65535 calls keeps 64 KiB per key: about 4,000 keys fill 256 MiB.
  BreakerSpec spec =
      parse_breaker("[breaker]\nkind = \"count\"\nwindow.size = 65535\nfailure_rate = 0.5\n", "b");
  std::string csv = "t_ms,key,duration_ms,outcome\n";
  for (int i = 0; i < 5000; ++i)
    csv += std::to_string(i) + ",key-" + std::to_string(i) + ",1,success\n";
  const std::string e = error_of([&] { (void)replay_text(spec, csv, "t.csv"); });
  EXPECT_NE(e.find("key: is distinct key 40"), std::string::npos) << e;
  EXPECT_NE(e.find("holds at most 256 MiB"), std::string::npos) << e;
  // The same keys repeated are one key each: no limit.
  std::string repeated = "t_ms,key,duration_ms,outcome\n";
  for (int i = 0; i < 5000; ++i)
    repeated += std::to_string(i) + ",key-" + std::to_string(i % 10) + ",1,success\n";
  EXPECT_NE(replay_text(spec, repeated, "t.csv").find("\"key\":\"key-9\""), std::string::npos);
}

TEST(KeyMemory, AKeyIsAtMostOneKibibyte) {
  BreakerSpec spec;
  const std::string e = error_of([&] {
    (void)replay_text(spec,
                      "t_ms,key,duration_ms,outcome\n0," + std::string(1025, 'k') + ",1,success\n",
                      "t.csv");
  });
  EXPECT_NE(e.find("t.csv:2:3: key: is longer than 1024 bytes (got 1025 bytes"), std::string::npos)
      << e;
  EXPECT_LT(e.size(), 300u);
}

}  // namespace
}  // namespace bulwark::lab
