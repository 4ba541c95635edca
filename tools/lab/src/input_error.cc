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
  std::string s = where.to_string();
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

std::string escape_for_error(std::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  const auto hex = [&](unsigned char c) {
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  };
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        ++i;
        continue;
      case '\\':
        out += "\\\\";
        ++i;
        continue;
      case '\r':
        out += "\\r";
        ++i;
        continue;
      case '\n':
        out += "\\n";
        ++i;
        continue;
      case '\t':
        out += "\\t";
        ++i;
        continue;
      default:
        break;
    }
    if (c < 0x20 || c == 0x7F) {
      hex(c);
      ++i;
      continue;
    }
    const std::size_t n = utf8_sequence_length(s, i);
    if (n == 0) {
      hex(c);
      ++i;
    } else if (n == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0) {
      hex(c);  // a C1 control character (U+0080 to U+009F)
      hex(static_cast<unsigned char>(s[i + 1]));
      i += 2;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string quote_for_error(std::string_view s) {
  std::string out(1, '"');
  out += escape_for_error(s);
  out += '"';
  return out;
}

}  // namespace bulwark::lab
