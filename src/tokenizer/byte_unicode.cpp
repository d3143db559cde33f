// The GPT-2 bytes<->unicode table (openai/gpt-2 encoder.py bytes_to_unicode); see byte_unicode.h.
#include "tokenizer/byte_unicode.h"

#include "tokenizer/utf8.h"

namespace fak {
namespace {

constexpr bool printable(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

// The bytes that are not printable get U+0100, U+0101, ... in byte order.
constexpr std::array<char32_t, 256> make_forward() {
  std::array<char32_t, 256> map{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) map[b] = printable(b) ? char32_t(b) : next++;
  return map;
}

constexpr std::array<char32_t, 256> kForward = make_forward();
constexpr char32_t kMaxImage = 256 + 68;  // 68 bytes are not printable

constexpr std::array<int16_t, kMaxImage> make_backward() {
  std::array<int16_t, kMaxImage> map{};
  for (auto& v : map) v = -1;
  for (int b = 0; b < 256; ++b) map[kForward[b]] = int16_t(b);
  return map;
}

constexpr std::array<int16_t, kMaxImage> kBackward = make_backward();

}  // namespace

const std::array<char32_t, 256>& byte_to_code_point() {
  return kForward;
}

int code_point_to_byte(char32_t cp) {
  return cp < kMaxImage ? kBackward[cp] : -1;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) append_utf8(out, kForward[b]);
  return out;
}

std::optional<std::string> byte_level_to_bytes(std::string_view text) {
  if (find_invalid_utf8(text) != std::string_view::npos) return std::nullopt;
  std::string out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  while (p < end) {
    int b = code_point_to_byte(next_code_point(p));
    if (b < 0) return std::nullopt;
    out += static_cast<char>(b);
  }
  return out;
}

}  // namespace fak
