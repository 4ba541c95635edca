// Internal to the lab: text for SVG output.

#ifndef BULWARK_LAB_SRC_XML_TEXT_H_
#define BULWARK_LAB_SRC_XML_TEXT_H_

#include <string>

#include "bulwark/lab/input_error.h"

namespace bulwark::lab::detail {

// Valid XML whatever the text holds. Control bytes and invalid UTF-8 (which XML 1.0
// refuses, even as character references) are shown as \xNN, the way the text reports
// show them; then the markup characters are escaped.
inline std::string xml_text(const std::string& text) {
  std::string out;
  for (char c : printable(text)) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace bulwark::lab::detail

#endif  // BULWARK_LAB_SRC_XML_TEXT_H_
