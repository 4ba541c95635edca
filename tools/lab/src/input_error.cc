#include "bulwark/lab/input_error.h"

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

}  // namespace bulwark::lab
