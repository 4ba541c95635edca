// The `bulwark` executable end to end: golden replay outputs on hand-made traces (every
// transition and decision checked against the expected file), the built-in incident's
// outcome read from --json, the chart, --help, and bad inputs — each exits 2 with an
// error naming the file, line and field, and prints nothing on stdout.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "process.h"

namespace bulwark::testing {
namespace {

const std::string kGolden = source_path("tests/cli/golden/");

// --- replay: golden files ----------------------------------------------------------

struct Golden {
  const char* name;
  bool decisions;
};

class ReplayGolden : public ::testing::TestWithParam<Golden> {};

TEST_P(ReplayGolden, MatchesTheExpectedLines) {
  const Golden g = GetParam();
  const std::string base = kGolden + g.name;
  std::vector<std::string> args{"replay", "--config", base + ".toml", base + ".csv"};
  if (g.decisions) args.insert(args.begin() + 1, "--decisions");
  const CliRun r = run(args);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out, read_all(base + ".jsonl"));
}

INSTANTIATE_TEST_SUITE_P(
    Traces, ReplayGolden,
    ::testing::Values(Golden{"consecutive_failures", true}, Golden{"failure_rate_count", true},
                      Golden{"keys_and_ignored", true}, Golden{"slow_calls_time", false},
                      Golden{"growing_open_period", false}, Golden{"flapping_growth", false}),
    [](const auto& p) { return std::string(p.param.name); });

TEST(Replay, ReadsStandardInput) {
  const std::string base = kGolden + "consecutive_failures";
  const CliRun r =
      run({"replay", "--decisions", "--config", base + ".toml", "-"}, read_all(base + ".csv"));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, read_all(base + ".jsonl"));
}

// docs/configuration.md shows this command and its output: they must stay true.
TEST(Replay, TheDocumentedExampleGivesTheDocumentedOutput) {
  const std::string command =
      "$ bulwark replay --config tools/examples/breaker.toml tools/examples/trace.csv";
  std::istringstream doc(read_all(source_path("docs/configuration.md")));
  std::string line, shown;
  bool found = false;
  while (std::getline(doc, line)) {
    if (line == command) {
      found = true;
      while (std::getline(doc, line) && line.rfind("```", 0) != 0) shown += line + "\n";
      break;
    }
  }
  ASSERT_TRUE(found) << "docs/configuration.md no longer shows: " << command;
  const CliRun r = run({"replay", "--config", source_path("tools/examples/breaker.toml"),
                        source_path("tools/examples/trace.csv")});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, shown);
}

// --- bad input: exit 2, a named error, nothing on stdout ------------------------------

void expect_bad_input(const std::vector<std::string>& args, const std::string& stdin_text,
                      const std::vector<std::string>& mentions) {
  const CliRun r = run(args, stdin_text);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(r.out, "") << "nothing half-printed as if it succeeded";
  EXPECT_EQ(r.err.rfind("bulwark: error: ", 0), 0u) << r.err;
  for (const std::string& m : mentions) EXPECT_NE(r.err.find(m), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("terminate called"), std::string::npos);
}

const std::string kHeader = "t_ms,key,duration_ms,outcome\n";

// Rows that open the breaker first, so a late error would follow printed transitions.
std::string opening_rows() {
  std::string rows;
  for (int i = 0; i < 5; ++i) rows += std::to_string(i) + ",k,1,failure\n";
  return rows;
}

TEST(BadInput, UnknownOutcome) {
  expect_bad_input({"replay", "--config", kGolden + "consecutive_failures.toml", "-"},
                   kHeader + opening_rows() + "9,k,1,sucess\n",
                   {"<stdin>:7:7: outcome: unknown outcome \"sucess\""});
}

TEST(BadInput, DecreasingTime) {
  expect_bad_input({"replay", "--config", kGolden + "consecutive_failures.toml", "-"},
                   kHeader + opening_rows() + "3,k,1,success\n",
                   {"<stdin>:7:1: t_ms: goes back in time: 3 after 4 on line 6"});
}

TEST(BadInput, MissingColumn) {
  expect_bad_input({"replay", "--config", kGolden + "consecutive_failures.toml", "-"},
                   "t_ms,key,outcome\n0,k,success\n", {"<stdin>:1: duration_ms: missing column"});
}

TEST(BadInput, NegativeDuration) {
  expect_bad_input({"replay", "--config", kGolden + "consecutive_failures.toml", "-"},
                   kHeader + opening_rows() + "9,k,-3,success\n",
                   {"<stdin>:7:5: duration_ms: must not be negative (got -3)"});
}

TEST(BadInput, UnknownConfigKey) {
  const std::string cfg = temp_path("cfg");
  std::ofstream(cfg) << "[breaker]\nconsecutive_failures = 3\nopen_durration = \"1s\"\n";
  expect_bad_input({"replay", "--config", cfg, kGolden + "consecutive_failures.csv"}, "",
                   {cfg + ":3:1: breaker.open_durration: unknown key \"open_durration\"",
                    "did you mean \"open_duration\"?"});
  std::remove(cfg.c_str());
}

TEST(BadInput, BadConfigValues) {
  const std::string cfg = temp_path("cfg");
  std::ofstream(cfg) << "[breaker]\nkind = \"count\"\nfailure_rate = 1.5\n";
  expect_bad_input({"replay", "--config", cfg, kGolden + "consecutive_failures.csv"}, "",
                   {cfg + ":3:16: breaker.failure_rate: must be in (0, 1] (got 1.5)"});
  std::ofstream(cfg) << "[breaker]\nopen_duration = \"30\"\n";
  expect_bad_input({"replay", "--config", cfg, kGolden + "consecutive_failures.csv"}, "",
                   {cfg + ":2:17: breaker.open_duration: has no unit"});
  std::remove(cfg.c_str());
}

TEST(BadInput, ScenarioErrors) {
  const std::string s = temp_path("scenario");
  std::ofstream(s) << "duration = \"1min\"\n[arrivals]\nrate = 10\n[caller]\nworkers = 5\n"
                      "[dependency]\n[[dependency.phases]]\nstart = \"0s\"\nlatency = \"1s\"\n"
                      "[config.a.breaker]\nkind = \"time\"\nslow_call_rate = 0.5\n"
                      "slow_call_duration = \"400ms\"\nwindow.buckets = 0\n";
  expect_bad_input({"simulate", s}, "",
                   {s + ":14:18: config.a.breaker.window.buckets: must be between 1 and 120"});
  std::remove(s.c_str());
}

TEST(BadInput, MissingFilesAndBadArguments) {
  expect_bad_input({"replay", "--config", "/nonexistent.toml", "x.csv"}, "",
                   {"/nonexistent.toml: cannot open the file"});
  expect_bad_input(
      {"replay", "--config", kGolden + "consecutive_failures.toml", "/nonexistent.csv"}, "",
      {"/nonexistent.csv: cannot open"});
  expect_bad_input({"replay", kGolden + "consecutive_failures.csv"}, "", {"--config is required"});
  expect_bad_input({"simulate", "--timeline-step", "5"}, "", {"--timeline-step: has no unit"});
  expect_bad_input({"simulate", "--timeline-step", "0s"}, "",
                   {"bulwark: error: --timeline-step: must be positive"});
  expect_bad_input({"simulate", "--timeline-step", "1ns"}, "",
                   {"bulwark: error: --timeline-step: makes more than 1000000 timeline rows"});
  expect_bad_input({"simulate", "--only", "nope"}, "",
                   {"--only: no configuration named \"nope\" (the scenario has before, after)"});
  expect_bad_input({"simulate", "--seed", "-4"}, "", {"--seed: must be a whole number"});
  expect_bad_input({"simulate", "--duration", "0s"}, "", {"--duration: must be positive"});
  expect_bad_input({"frobnicate"}, "", {"frobnicate"});
  expect_bad_input({}, "", {"A subcommand is required"});
}

TEST(BadInput, TheConfigurationAndTheTraceCannotBothBeStandardInput) {
  expect_bad_input({"replay", "--config", "-", "-"}, "[breaker]\nconsecutive_failures = 1\n",
                   {"--config: the configuration and the trace cannot both be read from standard "
                    "input"});
}

TEST(BadInput, ATraceWithBareCarriageReturnsIsNamedWithoutPrintingOne) {
  const CliRun r = run({"replay", "--config", kGolden + "consecutive_failures.toml", "-"},
                       "t_ms,key,duration_ms,outcome\r0,k,1,success\r");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err.find('\r'), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("<stdin>:1: the header line holds a carriage return (\\r)"),
            std::string::npos)
      << r.err;
}

TEST(BadInput, ATraceWithoutAHeader) {
  expect_bad_input({"replay", "--config", kGolden + "consecutive_failures.toml", "-"},
                   "0,k,1,success\n",
                   {"<stdin>:1: missing header: the first line must be the header "
                    "t_ms,key,duration_ms,outcome"});
}

// An output path that starts with '-' is an option swallowed as a file name.
TEST(BadInput, AnOutputPathThatLooksLikeAnOption) {
  expect_bad_input(
      {"simulate", "--json", "--no-timeline"}, "",
      {"--json: expected a file name or '-' (standard output), got \"--no-timeline\""});
  expect_bad_input({"simulate", "--svg", "-x.svg", "--duration", "10s"}, "",
                   {"--svg:", "./-x.svg"});
  std::ifstream stray("--no-timeline");
  EXPECT_FALSE(stray.good()) << "a file named --no-timeline was written";
}

// Outputs are opened before the simulation runs: a bad path prints nothing at all.
TEST(BadInput, AnOutputThatCannotBeOpenedFailsBeforeAnythingIsPrinted) {
  const CliRun r =
      run({"simulate", "--json", "-", "--svg", "/nonexistent/x.svg", "--duration", "10s"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "bulwark: error: --svg: cannot open /nonexistent/x.svg for writing: No such "
            "file or directory\n");
  const CliRun text = run({"simulate", "--json", "/nonexistent/x.json", "--duration", "10s"});
  EXPECT_EQ(text.status, 1) << text.err;
  EXPECT_EQ(text.out, "");
  EXPECT_NE(text.err.find("/nonexistent/x.json"), std::string::npos) << text.err;
  // The other output is left as it was: an existing file keeps its content, a new one is
  // removed again.
  const std::string kept = temp_path("kept");
  std::ofstream(kept) << "previous results\n";
  const CliRun failed =
      run({"simulate", "--json", kept, "--svg", "/nonexistent/x.svg", "--duration", "10s"});
  EXPECT_EQ(failed.status, 1) << failed.err;
  EXPECT_EQ(read_all(kept), "previous results\n");
  std::remove(kept.c_str());
  const CliRun again =
      run({"simulate", "--json", kept, "--svg", "/nonexistent/x.svg", "--duration", "10s"});
  EXPECT_EQ(again.status, 1) << again.err;
  EXPECT_FALSE(std::ifstream(kept).good()) << "a file the failed command created";
}

TEST(BadInput, JsonAndSvgCannotShareAFile) {
  expect_bad_input({"simulate", "--json", "out.txt", "--svg", "out.txt"}, "",
                   {"--svg: names the same file as --json"});
}

// --only takes one NAME per flag: the scenario after it is the scenario, not a name.
TEST(Simulate, OnlyTakesOneNamePerFlag) {
  const std::string scenario = source_path("tools/examples/incident.toml");
  const CliRun r =
      run({"simulate", "--only", "after", scenario, "--json", "-", "--duration", "10s"});
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("scenario").at("source"), scenario);
  ASSERT_EQ(j.at("configurations").size(), 1u);
  EXPECT_EQ(j.at("configurations")[0].at("name"), "after");

  const CliRun both =
      run({"simulate", "--only", "after", "--only", "before", "--json", "-", "--duration", "10s"});
  ASSERT_EQ(both.status, 0) << both.err;
  const nlohmann::json b = nlohmann::json::parse(both.out);
  ASSERT_EQ(b.at("configurations").size(), 2u);
  EXPECT_EQ(b.at("configurations")[0].at("name"), "after");
  EXPECT_EQ(b.at("configurations")[1].at("name"), "before");
}

// --- simulate -----------------------------------------------------------------------

// The one full run of the built-in incident in this suite (it is the slowest test under
// ThreadSanitizer): the incident's story, read from --json.
TEST(Simulate, TheIncidentFromJsonBeforeSaturatesAfterOpensAndDegrades) {
  const CliRun r = run({"simulate", "--json", "-"});
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const auto& configs = j.at("configurations");
  ASSERT_EQ(configs.size(), 2u);
  const auto& before = configs[0].at("summary");
  const auto& after = configs[1].at("summary");
  EXPECT_EQ(configs[0].at("name"), "before");
  EXPECT_EQ(configs[1].at("name"), "after");
  const double workers = j.at("scenario").at("caller").at("workers").get<double>();

  // Before: the caller saturates — every worker stuck on reviews, a large share of all
  // requests lost, pages waiting 14 s.
  EXPECT_EQ(before.at("peak_workers_busy").get<double>(), workers);
  EXPECT_GT(before.at("lost").get<double>(), 0.3 * before.at("requests").get<double>());
  EXPECT_GT(before.at("p99_ms").get<double>(), 13'000);
  EXPECT_FALSE(before.at("has_breaker").get<bool>());
  EXPECT_TRUE(before.at("time_to_open_ms").is_null());

  // After: the breaker opens within seconds of the degradation, nothing is lost, and
  // the pages are served without reviews.
  ASSERT_TRUE(after.at("time_to_open_ms").is_number());
  EXPECT_LE(after.at("time_to_open_ms").get<double>(), 15'000);
  EXPECT_EQ(after.at("lost"), 0);
  EXPECT_EQ(after.at("failed"), 0);
  EXPECT_GT(after.at("served_degraded").get<double>(), 0.5 * after.at("requests").get<double>());
  EXPECT_LE(after.at("peak_in_flight").get<int>(), 80);
  EXPECT_LT(after.at("peak_workers_busy").get<double>(), workers / 5);
  EXPECT_LT(after.at("calls_while_degraded").get<double>(),
            before.at("calls_while_degraded").get<double>() / 10);
  EXPECT_LE(after.at("p99_ms").get<double>(), 1000);
  EXPECT_TRUE(after.at("alert_at_ms").is_number()) << "open over 5 minutes: the alert fires";

  // It closes again once reviews recovered (at 7 min), within one open period.
  const auto& transitions = configs[1].at("transitions");
  ASSERT_FALSE(transitions.empty());
  EXPECT_EQ(transitions.back().at("to"), "closed");
  EXPECT_GE(transitions.back().at("t_ms").get<double>(), 420'000);
  EXPECT_LE(transitions.back().at("t_ms").get<double>(), 420'000 + 31'000);

  // Every request ends exactly once.
  for (const auto& c : configs) {
    const auto& s = c.at("summary");
    EXPECT_EQ(s.at("lost").get<std::uint64_t>() + s.at("served_full").get<std::uint64_t>() +
                  s.at("served_degraded").get<std::uint64_t>() +
                  s.at("failed").get<std::uint64_t>(),
              s.at("requests").get<std::uint64_t>());
  }

  // The timeline says the same, second by second.
  const auto& timeline = configs[1].at("timeline");
  ASSERT_EQ(timeline.size(), 600u);
  EXPECT_EQ(timeline[30].at("state"), "closed");
  EXPECT_EQ(timeline[120].at("state"), "open");
  EXPECT_EQ(configs[0].at("timeline")[120].at("peak_busy").get<double>(), workers);
  EXPECT_GT(configs[0].at("timeline")[120].at("lost").get<int>(), 200);
}

TEST(Simulate, TextByDefaultWithBothConfigurationsSideBySide) {
  const CliRun r = run({"simulate", "--no-timeline", "--duration", "80s"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("Summary"), std::string::npos);
  EXPECT_NE(r.out.find("before"), std::string::npos);
  EXPECT_NE(r.out.find("after"), std::string::npos);
  EXPECT_NE(r.out.find("time from degradation to breaker open"), std::string::npos);
  EXPECT_EQ(r.out.find("Timeline"), std::string::npos);
}

TEST(Simulate, WritesTheChart) {
  const std::string svg = temp_path("chart");
  const CliRun r = run(
      {"simulate", "--no-timeline", "--svg", svg, "--timeline-step", "5s", "--duration", "80s"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string chart = read_all(svg);
  EXPECT_EQ(chart.rfind("<svg", 0), 0u);
  EXPECT_NE(chart.find("breaker"), std::string::npos);
  EXPECT_NE(r.out.find("Chart written to " + svg), std::string::npos);
  std::remove(svg.c_str());
}

TEST(Simulate, ThePrintedScenarioRunsAsAFile) {
  const CliRun printed = run({"simulate", "--print-scenario"});
  ASSERT_EQ(printed.status, 0);
  const std::string file = temp_path("incident");
  std::ofstream(file) << printed.out;
  const CliRun from_file = run({"simulate", file, "--json", "-", "--duration", "70s"});
  const CliRun built_in = run({"simulate", "--json", "-", "--duration", "70s"});
  ASSERT_EQ(from_file.status, 0) << from_file.err;
  auto a = nlohmann::json::parse(from_file.out), b = nlohmann::json::parse(built_in.out);
  a["scenario"].erase("source");
  b["scenario"].erase("source");
  EXPECT_EQ(a, b);
  std::remove(file.c_str());
}

TEST(Help, EverySubcommandHasIt) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--help"}, {"simulate", "--help"}, {"replay", "--help"}}) {
    const CliRun r = run(args);
    EXPECT_EQ(r.status, 0);
    EXPECT_NE(r.out.find("Usage:"), std::string::npos) << r.out;
  }
  const CliRun sim = run({"simulate", "--help"});
  for (const char* option : {"--json", "--svg", "--seed", "--duration", "--timeline-step", "--only",
                             "--no-timeline", "--print-scenario"}) {
    EXPECT_NE(sim.out.find(option), std::string::npos) << option;
  }
  const CliRun rep = run({"replay", "--help"});
  for (const char* option : {"--config", "--decisions", "t_ms,key,duration_ms,outcome"}) {
    EXPECT_NE(rep.out.find(option), std::string::npos) << option;
  }
}

// --- outputs that cannot be written, outputs that would overwrite an input ---------

bool has_dev_full() { return std::ofstream("/dev/full").good(); }

// Every command that writes checks its writes, flushed: to a full device it exits 1
// with the reason, never 0 with nothing written.
TEST(Output, AFullDeviceIsAnErrorForEveryCommandThatWrites) {
  if (!has_dev_full()) GTEST_SKIP() << "no /dev/full here";
  const std::string breaker = source_path("tools/examples/breaker.toml");
  const std::string trace = source_path("tools/examples/trace.csv");
  struct Case {
    std::vector<std::string> args;
    bool to_stdout;  // else the file output is /dev/full and stdout a file
    std::string says;
  };
  const std::string out = "cannot write to standard output: No space left on device";
  const std::vector<Case> cases = {
      {{"simulate", "--duration", "10s", "--no-timeline"}, true, out},
      {{"simulate", "--duration", "10s"}, true, out},
      {{"simulate", "--print-scenario"}, true, out},
      {{"simulate", "--fleet", "--print-scenario"}, true, out},
      {{"simulate", "--duration", "10s", "--json", "-"}, true, out},
      {{"simulate", "--duration", "10s", "--svg", "-"}, true, out},
      {{"simulate", "--duration", "10s", "--json", "/dev/full"},
       false,
       "--json: cannot write /dev/full: No space left on device"},
      {{"simulate", "--duration", "10s", "--svg", "/dev/full"},
       false,
       "--svg: cannot write /dev/full: No space left on device"},
      {{"replay", "--config", breaker, trace}, true, "No space left on device"},
      {{"replay", "--config", breaker, "--decisions", trace}, true, "No space left on device"},
      {{"calibrate", trace}, true, out},
      {{"calibrate", trace, "--key", "reviews", "--toml", "-"}, true, out},
      {{"calibrate", trace, "--json", "/dev/full"},
       false,
       "--json: cannot write /dev/full: No space left on device"},
      {{"calibrate", trace, "--svg", "/dev/full"}, false, "--svg: cannot write /dev/full"},
      {{"calibrate", trace, "--key", "reviews", "--toml", "/dev/full"},
       false,
       "--toml: cannot write /dev/full"},
      {{"calibrate", trace, "--key", "reviews", "--scenario", "/dev/full"},
       false,
       "--scenario: cannot write /dev/full"},
      {{"--help"}, true, out},
      {{"--version"}, true, out},
      {{"calibrate", "--help"}, true, out},
  };
  for (const Case& c : cases) {
    std::string shown;
    for (const std::string& a : c.args) shown += " " + a;
    const CliRun r = run(c.args, "", {}, c.to_stdout ? "/dev/full" : "");
    EXPECT_EQ(r.status, 1) << shown << ": " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << shown << ": " << r.err;
    EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << shown;
  }
  // A fleet's report, where the build has the fleet.
  const CliRun fleet = run({"simulate", "--fleet", "--duration", "10s"}, "", {}, "/dev/full");
  if (fleet.err.find("no fleet support") == std::string::npos) {
    EXPECT_EQ(fleet.status, 1) << fleet.err;
    EXPECT_NE(fleet.err.find(out), std::string::npos) << fleet.err;
  }
  // `bulwark demo` (where the build has it) stops at its header, before its 30 s run.
  if (run({"demo", "--help"}).status == 0) {
    const CliRun demo = run({"demo"}, "", {}, "/dev/full");
    EXPECT_EQ(demo.status, 1) << demo.err;
    EXPECT_NE(demo.err.find("No space left on device"), std::string::npos) << demo.err;
  }
}

// An output that is one of the command's inputs, under any name (the same path, ./, a
// symbolic or a hard link, standard input or output), is refused before anything is
// written: exit 2, naming the flag and the input, and the input is left as it was.
TEST(Output, AnOutputThatIsAnInputIsRefusedAndTheInputKept) {
  const std::string dir = temp_path("dir");
  std::remove(dir.c_str());
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  const std::string scenario = dir + "/s.toml", trace = dir + "/t.csv", breaker = dir + "/b.toml";
  const std::string scenario_text = read_all(source_path("tools/examples/incident.toml"));
  const std::string trace_text = read_all(source_path("tools/examples/trace.csv"));
  const std::string breaker_text = read_all(source_path("tools/examples/breaker.toml"));
  std::ofstream(scenario, std::ios::binary) << scenario_text;
  std::ofstream(trace, std::ios::binary) << trace_text;
  std::ofstream(breaker, std::ios::binary) << breaker_text;
  ASSERT_EQ(symlink("s.toml", (dir + "/link.toml").c_str()), 0);
  ASSERT_EQ(link(trace.c_str(), (dir + "/hard.csv").c_str()), 0);
  const auto refused = [&](const std::vector<std::string>& args, const std::string& says,
                           const std::string& stdout_to = "", const std::string& stdin_from = "") {
    std::string shown;
    for (const std::string& a : args) shown += " " + a;
    const CliRun r = run(args, "", {}, stdout_to, stdin_from);
    EXPECT_EQ(r.status, 2) << shown << ": " << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << shown << ": " << r.err;
    EXPECT_NE(r.err.find("which this command reads"), std::string::npos) << shown << ": " << r.err;
    EXPECT_EQ(read_all(scenario), scenario_text) << shown;
    EXPECT_EQ(read_all(trace), trace_text) << shown;
    EXPECT_EQ(read_all(breaker), breaker_text) << shown;
  };
  refused({"simulate", scenario, "--duration", "10s", "--json", scenario},
          "--json: names the scenario");
  refused({"simulate", scenario, "--duration", "10s", "--svg", dir + "/./s.toml"},
          "--svg: names the scenario");
  refused({"simulate", scenario, "--duration", "10s", "--json", dir + "/link.toml"},
          "--json: names the scenario");
  refused({"simulate", dir + "/link.toml", "--duration", "10s", "--json", "-", "--svg", scenario},
          "--svg: names the scenario");
  refused({"simulate", "-", "--duration", "10s", "--svg", scenario},
          "--svg: names the scenario (standard input)", "", scenario);
  refused({"simulate", scenario, "--duration", "10s"}, "standard output is the scenario", scenario);
  refused({"calibrate", trace, "--json", trace}, "--json: names the trace");
  refused({"calibrate", trace, "--svg", dir + "/hard.csv"}, "--svg: names the trace");
  refused({"calibrate", dir + "/hard.csv", "--key", "reviews", "--toml", trace},
          "--toml: names the trace");
  refused({"calibrate", trace, "--key", "reviews", "--scenario", trace},
          "--scenario: names the trace");
  refused({"calibrate", "-", "--json", trace}, "--json: names the trace (standard input)", "",
          trace);
  refused({"calibrate", trace}, "standard output is the trace", trace);
  refused({"replay", "--config", breaker, trace}, "standard output is the trace", trace);
  refused({"replay", "--config", breaker, trace}, "standard output is the configuration", breaker);
  // Another file is written as before.
  const CliRun ok = run({"simulate", scenario, "--duration", "10s", "--json", dir + "/r.json"});
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_EQ(read_all(scenario), scenario_text);
  for (const char* f : {"/s.toml", "/t.csv", "/b.toml", "/link.toml", "/hard.csv", "/r.json"}) {
    std::remove((dir + f).c_str());
  }
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace bulwark::testing
