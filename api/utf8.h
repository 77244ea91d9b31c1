// UTF-8 validity (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF) for text
// read from files that is later written out as JSON, which must be UTF-8: a job file, the
// trainer's YAML, a --set assignment, an error body quoted in a status message. Header-only, so the
// worker's config reader uses it without linking the api.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tessera::api {

// Characters (code points) of a UTF-8 string, as the apiserver and CEL's size() count a
// string's length.
inline int64_t Utf8Length(std::string_view s) {
  int64_t n = 0;
  for (unsigned char c : s)
    n += (c & 0xC0) != 0x80;
  return n;
}

// The byte offset at which character `chars` (from 0) of `s` begins; s.size() when `s` has no
// more characters. Cuts a string between characters: s.substr(0, Utf8Offset(s, 40)) is its
// first 40, s.substr(Utf8Offset(s, Utf8Length(s) - 40)) its last 40.
inline size_t Utf8Offset(std::string_view s, int64_t chars) {
  int64_t seen = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && ++seen == chars)
      return i;
  }
  return s.size();
}

// The offset of the first byte that neither begins nor continues a valid UTF-8 sequence;
// nullopt when all of `s` is valid.
inline std::optional<size_t> FirstInvalidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto lead = static_cast<uint8_t>(s[i]);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    size_t length = 0;
    uint32_t code = 0, least = 0;
    if ((lead >> 5) == 0x6) {
      length = 2, code = lead & 0x1F, least = 0x80;
    } else if ((lead >> 4) == 0xE) {
      length = 3, code = lead & 0x0F, least = 0x800;
    } else if ((lead >> 3) == 0x1E) {
      length = 4, code = lead & 0x07, least = 0x10000;
    } else {
      return i;  // a continuation byte without a lead, or 0xF8..0xFF
    }
    if (s.size() - i < length)
      return i;
    for (size_t k = 1; k < length; ++k) {
      const auto next = static_cast<uint8_t>(s[i + k]);
      if ((next & 0xC0) != 0x80)
        return i;
      code = (code << 6) | (next & 0x3F);
    }
    if (code < least || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF))
      return i;
    i += length;
  }
  return std::nullopt;
}

// The first `max_bytes` bytes of `s` with every byte that is not part of a valid UTF-8
// sequence (a sequence cut at the end included) replaced by '?': text from elsewhere, such as
// a server's error body, made safe to quote in JSON.
inline std::string ValidUtf8Prefix(std::string_view s, size_t max_bytes = std::string_view::npos) {
  s = s.substr(0, max_bytes);
  std::string out;
  out.reserve(s.size());
  while (!s.empty()) {
    const std::optional<size_t> bad = FirstInvalidUtf8(s);
    out.append(s.substr(0, bad.value_or(s.size())));
    if (!bad)
      break;
    out.push_back('?');
    s.remove_prefix(*bad + 1);
  }
  return out;
}

// The offset of the first byte that keeps `s` from being YAML text as Tessera reads it: UTF-8
// without NUL bytes. YAML allows no NUL, and yaml-cpp takes NULs among the first bytes for
// UTF-16 or UTF-32 ("!\0\0\0..." reads as UTF-32LE), turning the rest into other characters
// altogether, some not even Unicode.
inline std::optional<size_t> FirstNonTextByte(std::string_view s) {
  const size_t nul = s.find('\0');
  const std::optional<size_t> bad = FirstInvalidUtf8(s.substr(0, nul));
  if (bad)
    return bad;
  if (nul != std::string_view::npos)
    return nul;
  return std::nullopt;
}

// "line L, column C: not UTF-8 text (byte 0xFF); save the file as UTF-8" for the byte at
// `offset` of `s` (lines and columns from 1, columns in bytes).
inline std::string NonTextMessage(std::string_view s, size_t offset) {
  size_t line = 1, line_start = 0;
  for (size_t i = 0; i < offset && i < s.size(); ++i) {
    if (s[i] == '\n')
      ++line, line_start = i + 1;
  }
  static const char* kHex = "0123456789ABCDEF";
  const auto byte = static_cast<uint8_t>(offset < s.size() ? s[offset] : 0);
  return "line " + std::to_string(line) + ", column " + std::to_string(offset - line_start + 1) +
         ": not UTF-8 text (byte 0x" + kHex[byte >> 4] + kHex[byte & 0xF] +
         "); save the file as UTF-8";
}

}  // namespace tessera::api
