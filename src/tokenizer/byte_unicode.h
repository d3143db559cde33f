// GPT-2's reversible map between the 256 byte values and 256 printable code points, which is how
// byte-level BPE vocabularies spell raw bytes ("Ġ" is the space byte, "Ċ" the newline).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace fak {

// byte -> code point (printable ASCII and most of Latin-1 map to themselves, the rest to U+0100+).
const std::array<char32_t, 256>& byte_to_code_point();

// code point -> byte, or -1 when cp is not one of the 256 image code points.
int code_point_to_byte(char32_t cp);

// Raw bytes -> the byte-level spelling (UTF-8 of the mapped code points).
std::string bytes_to_byte_level(std::string_view bytes);

// The byte-level spelling -> raw bytes; nullopt when the text is not valid UTF-8 or holds a code
// point outside the map (e.g. an added token's literal content).
std::optional<std::string> byte_level_to_bytes(std::string_view text);

}  // namespace fak
