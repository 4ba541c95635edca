// bulwark/lab/input_error.h — a user's input was wrong, and exactly where.
//
// Everything the lab reads from a person (a TOML file, a CSV trace, a command-line
// value) is checked before anything runs, and a bad value stops the command with an
// error that names the file, the line and the field, never a crash or a silent default:
//
//   breaker.toml:4:16: breaker.failure_rate: must be in (0, 1] (got 1.5)
//   trace.csv:17: outcome: unknown outcome "sucess" (expected success, failure or ignored)
//
// The CLI prints what() and exits with status 2.

#ifndef BULWARK_LAB_INPUT_ERROR_H_
#define BULWARK_LAB_INPUT_ERROR_H_

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace bulwark::lab {

// Where in a file. line and column count from 1; 0 means unknown (the whole file, or
// the whole line).
struct SourceLocation {
  std::string file;
  std::uint32_t line = 0;
  std::uint32_t column = 0;

  // "file:line:column", "file:line" or "file".
  std::string to_string() const;
};

class InputError : public std::runtime_error {
 public:
  // `field` is the key or column at fault, as the user wrote it ("breaker.failure_rate",
  // "outcome"); it may be empty when the whole input is at fault (a file that is not TOML).
  InputError(SourceLocation where, std::string field, std::string message);

  const SourceLocation& where() const noexcept { return where_; }
  const std::string& field() const noexcept { return field_; }
  const std::string& message() const noexcept { return message_; }

 private:
  SourceLocation where_;
  std::string field_;
  std::string message_;
};

// Text from the input, made safe to print in an error: printable ASCII and valid UTF-8
// as they are; '"' and '\\' escaped; \r, \n and \t as such; every other control byte
// (C0, DEL, C1) and every byte that is not part of valid UTF-8 as \xNN. So an error never
// prints a raw carriage return or a broken character:  sucess\r  ->  sucess\r (four
// characters more, not a line end). Input longer than kMaxEchoed bytes is cut there (at
// a character boundary) and ends in "...", so a 5 MB key is not echoed whole.
inline constexpr std::size_t kMaxEchoed = 100;
std::string escape_for_error(std::string_view text);
// The same, in double quotes: "sucess\r"; a cut text also says its length:
// "xxxx..." (5000000 bytes).
std::string quote_for_error(std::string_view text);

// Text from the input, made safe to show on a terminal or in a report: like
// escape_for_error (control bytes and invalid UTF-8 as \r, \n, \t or \xNN, and the
// noncharacters U+FFFE and U+FFFF as \xNN too, since XML refuses them) but with quotes
// and backslashes as they are, and never cut. An ESC in a configuration's name reaches
// the reader as the four characters \x1b, never as the start of an escape sequence.
std::string printable(std::string_view text);

// The length of the valid UTF-8 sequence that starts text[i] (1 for ASCII), or 0 if
// the byte there does not start one (overlong forms, surrogates and values past
// U+10FFFF are not UTF-8).
std::size_t utf8_sequence_length(std::string_view text, std::size_t i) noexcept;

}  // namespace bulwark::lab

#endif  // BULWARK_LAB_INPUT_ERROR_H_
