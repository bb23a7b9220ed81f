// A message as one printable line: input echoed in an error (a key, a path, a value) may hold control
// characters or Unicode line separators, which would split the one-line message or drive the terminal.
#pragma once

#include <cstdio>
#include <string>

namespace minimllm {

// Bytes below 0x20 and 0x7f, and U+0085, U+2028 and U+2029 in UTF-8, as \xHH escapes; the rest unchanged.
inline std::string printable(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  const auto escape = [&out](unsigned char c) {
    char hex[5];
    std::snprintf(hex, sizeof hex, "\\x%02x", c);
    out += hex;
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const bool separator =
        (c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) == 0x85) ||
        (c == 0xe2 && i + 2 < text.size() && static_cast<unsigned char>(text[i + 1]) == 0x80 &&
         (static_cast<unsigned char>(text[i + 2]) == 0xa8 ||
          static_cast<unsigned char>(text[i + 2]) == 0xa9));
    if (separator) {
      const std::size_t length = c == 0xc2 ? 2 : 3;
      for (std::size_t k = 0; k < length; ++k) escape(static_cast<unsigned char>(text[i + k]));
      i += length - 1;
    } else if (c < 0x20 || c == 0x7f) {
      escape(c);
    } else {
      out += text[i];
    }
  }
  return out;
}

}  // namespace minimllm
