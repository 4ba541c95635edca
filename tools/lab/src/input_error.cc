#include "bulwark/lab/input_error.h"

#include <cstdint>
#include <utility>

namespace bulwark::lab {

std::string SourceLocation::to_string() const {
  std::string s = file;
  if (line > 0) s.append(":").append(std::to_string(line));
  if (line > 0 && column > 0) s.append(":").append(std::to_string(column));
  return s;
}

namespace {
std::string describe(const SourceLocation& where, const std::string& field,
                     const std::string& message) {
  // A file name comes from the command line: shown, never obeyed by the terminal.
  std::string s = printable(where.to_string());
  if (!s.empty()) s += ": ";
  if (!field.empty()) s += field + ": ";
  return s + message;
}
}  // namespace

InputError::InputError(SourceLocation where, std::string field, std::string message)
    : std::runtime_error(describe(where, field, message)),
      where_(std::move(where)),
      field_(std::move(field)),
      message_(std::move(message)) {}

std::size_t utf8_sequence_length(std::string_view s, std::size_t i) noexcept {
  const auto c = static_cast<unsigned char>(s[i]);
  std::size_t n = 0;
  std::uint32_t cp = 0;
  if (c < 0x80) {
    return 1;
  } else if ((c & 0xE0) == 0xC0) {
    n = 1, cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 2, cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 3, cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n >= s.size()) return 0;  // truncated sequence
  for (std::size_t k = 1; k <= n; ++k) {
    const auto d = static_cast<unsigned char>(s[i + k]);
    if ((d & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (d & 0x3F);
  }
  if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
      (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
    return 0;
  }
  return n + 1;
}

namespace {

// Appends `s` escaped; quotes and backslashes too when `for_error`.
void append_escaped(std::string& out, std::string_view s, bool for_error) {
  static const char kHex[] = "0123456789abcdef";
  const auto hex = [&](unsigned char c) {
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  };
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const char* named = nullptr;
    switch (c) {
      case '"':
        named = for_error ? "\\\"" : nullptr;
        break;
      case '\\':
        named = for_error ? "\\\\" : nullptr;
        break;
      case '\r':
        named = "\\r";
        break;
      case '\n':
        named = "\\n";
        break;
      case '\t':
        named = "\\t";
        break;
      default:
        break;
    }
    if (named != nullptr) {
      out += named;
      ++i;
      continue;
    }
    if (c < 0x20 || c == 0x7F) {
      hex(c);
      ++i;
      continue;
    }
    const std::size_t n = utf8_sequence_length(s, i);
    const auto next = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
    if (n == 0) {
      hex(c);
      ++i;
    } else if ((n == 2 && c == 0xC2 && next(1) < 0xA0) ||
               (n == 3 && c == 0xEF && next(1) == 0xBF && next(2) >= 0xBE)) {
      // A C1 control character (U+0080 to U+009F), or U+FFFE / U+FFFF.
      for (std::size_t k = 0; k < n; ++k) hex(next(k));
      i += n;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
}

// The first kMaxEchoed bytes of `s`, cut at a character boundary.
std::string_view head(std::string_view s) {
  std::size_t cut = kMaxEchoed;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut);
}

}  // namespace

std::string escape_for_error(std::string_view s) {
  std::string out;
  if (s.size() <= kMaxEchoed) {
    out.reserve(s.size());
    append_escaped(out, s, true);
    return out;
  }
  append_escaped(out, head(s), true);
  out += "...";
  return out;
}

std::string quote_for_error(std::string_view s) {
  std::string out(1, '"');
  if (s.size() <= kMaxEchoed) {
    append_escaped(out, s, true);
    out += '"';
    return out;
  }
  append_escaped(out, head(s), true);
  out += "...\" (" + std::to_string(s.size()) + " bytes)";
  return out;
}

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  append_escaped(out, s, false);
  return out;
}

}  // namespace bulwark::lab
