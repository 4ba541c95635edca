// The `bulwark` command line as a library: main() is bulwark::cli::main(), and the fuzz
// harness drives CommandLine::parse() alone — every check that needs no file, with
// nothing read, written or run.
//
//   bulwark::cli::CommandLine line;
//   bulwark::cli::Command c = line.parse(argc, argv);   // throws on bad arguments
//
// Not thread-safe; one CommandLine parses once.

#ifndef BULWARK_TOOLS_CLI_H_
#define BULWARK_TOOLS_CLI_H_

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bulwark/clock.h"

namespace bulwark::cli {

// An option's value and whether it was given at all: `--json ""` is given (and an
// error), not the same as no --json.
struct Given {
  std::string value;
  bool given = false;
};

struct SimulateArgs {
  Given scenario;
  Given json;
  Given svg;
  Given timeline_step{"1s"};
  Given duration;
  std::vector<std::string> only;
  std::optional<std::uint64_t> seed;
  bool no_timeline = false;
  bool print_scenario = false;
  bool fleet = false;  // --fleet: the built-in fleet scenario, or SCENARIO's [fleet]
  Given builtin;       // --builtin NAME: a built-in scenario other than the incident
  // Set by parse(): the durations, read.
  Nanos step = std::chrono::seconds(1);
  std::optional<Nanos> duration_value;
};

struct ReplayArgs {
  std::string config;
  std::string trace;
  bool decisions = false;
};

struct CalibrateArgs {
  std::string trace;
  Given false_opens_per_day{"1"};
  Given json;
  Given svg;
  Given toml;
  Given scenario;
  std::vector<std::string> keys;
  // Set by parse(): the budget, read.
  double false_opens = 1;
};

struct Command {
  bool simulate = true;    // else replay, calibrate or demo
  bool calibrate = false;  // (simulate is false then)
  bool demo = false;       // `bulwark demo`: the live loopback incident (demo.h)
  SimulateArgs sim;
  ReplayArgs rep;
  CalibrateArgs cal;
};

class CommandLine {
 public:
  CommandLine();
  ~CommandLine();
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  // Reads the arguments and checks everything that needs no file. Throws
  // CLI::ParseError (CLI11's own errors; --help and --version are ParseErrors whose
  // exit code is 0) or bulwark::lab::InputError.
  Command parse(int argc, const char* const* argv);
  // Prints --help or --version (or a ParseError) as CLI11 does; the exit status.
  int exit(const CLI::ParseError& e);

 private:
  std::unique_ptr<CLI::App> app_;
  CLI::App* simulate_ = nullptr;
  CLI::App* calibrate_ = nullptr;
  CLI::App* demo_ = nullptr;
  Command command_;
};

// Parses, runs and prints any error: the exit status (0 success, 2 bad input, 1 the
// output could not be written).
int main(int argc, const char* const* argv);

}  // namespace bulwark::cli

#endif  // BULWARK_TOOLS_CLI_H_
