// bulwark — the lab: simulate an incident in virtual time, replay a recorded trace.
//
//   bulwark simulate                          # the hotel-reviews incident, before vs after
//   bulwark simulate --svg incident.svg       # ...and the picture
//   bulwark simulate my-scenario.toml --json results.json
//   bulwark replay --config breaker.toml trace.csv
//
// Exit status: 0 on success, 2 for bad input (arguments, configuration, trace: the
// message names the file, line and field), 1 when output cannot be written.

#include "cli.h"

int main(int argc, char** argv) { return bulwark::cli::main(argc, argv); }
