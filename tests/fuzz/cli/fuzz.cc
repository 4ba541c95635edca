// The `bulwark` command line, in-process: the input is its arguments, separated by NUL
// bytes ("simulate\0--json\0\0" is `bulwark simulate --json ""`). CommandLine::parse()
// runs every check that needs no file, and reads, writes and runs nothing, so any
// argument is safe to try. Bad arguments must be a CLI11 error or a clear InputError;
// accepted ones must be what the checks promise (no empty file name, no option
// --print-scenario would ignore, a positive timeline step, no --only name twice).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "bulwark/lab/input_error.h"
#include "cli.h"
#include "lab_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace bulwark;
  using fuzz::check;
  std::vector<std::string> args{"bulwark"};
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  while (!rest.empty() && args.size() < 64) {
    const std::size_t nul = rest.find('\0');
    args.emplace_back(rest.substr(0, nul));
    rest = nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);
  }
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  cli::Command c;
  try {
    cli::CommandLine line;
    c = line.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError&) {
    return 0;  // CLI11's own errors and --help / --version
  } catch (const lab::InputError& e) {
    fuzz::check_error(e);
    return 0;
  }
  if (c.simulate) {
    const cli::SimulateArgs& s = c.sim;
    check(!s.print_scenario || (!s.scenario.given && !s.json.given && !s.svg.given &&
                                !s.duration.given && !s.timeline_step.given && s.only.empty()),
          "--print-scenario takes nothing else");
    if (!s.print_scenario) {
      for (const cli::Given* g : {&s.scenario, &s.json, &s.svg}) {
        check(!g->given || !g->value.empty(), "no empty file name");
      }
      check(s.step > Nanos::zero(), "a positive timeline step");
      for (std::size_t i = 0; i < s.only.size(); ++i) {
        for (std::size_t j = 0; j < i; ++j) check(s.only[i] != s.only[j], "--only names differ");
      }
      check(!s.duration.given || (s.duration_value && *s.duration_value > Nanos::zero()),
            "a positive duration");
    }
  } else if (c.calibrate) {
    check(!c.cal.trace.empty(), "no empty file name");
    check(c.cal.false_opens > 0, "a positive false-open budget");
  } else {
    check(!c.rep.config.empty() && !c.rep.trace.empty(), "no empty file name");
    check(c.rep.config != "-" || c.rep.trace != "-", "one standard input");
  }
  return 0;
}
