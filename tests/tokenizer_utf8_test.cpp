// UTF-8 validation, NFC (and its fast path), the streaming cut and the GPT-2 byte map.
#include <gtest/gtest.h>
#include <utf8proc.h>

#include <cstdlib>

#include "core/error.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/utf8.h"

namespace fak {
namespace {

TEST(TokenizerUtf8, FindsFirstInvalidByte) {
  EXPECT_EQ(find_invalid_utf8(""), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("plain ascii, longer than eight bytes"), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("h\xC3\xA9llo \xF0\x9F\x98\x80"), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("\xEF\xBF\xBF\xF4\x8F\xBF\xBF"), std::string_view::npos);  // maxima
  EXPECT_EQ(find_invalid_utf8("0123456789\x80"), 10u);     // lone continuation
  EXPECT_EQ(find_invalid_utf8("ab\xE0\x9F\x80"), 2u);      // overlong 3-byte
  EXPECT_EQ(find_invalid_utf8("ab\xF0\x8F\xBF\xBF"), 2u);  // overlong 4-byte
  EXPECT_EQ(find_invalid_utf8("ab\xED\xBF\xBF"), 2u);      // surrogate
  EXPECT_EQ(find_invalid_utf8("ab\xF4\x90\x80\x80"), 2u);  // above U+10FFFF
  EXPECT_EQ(find_invalid_utf8("ab\xF5\x80\x80\x80"), 2u);
  EXPECT_EQ(find_invalid_utf8("ab\xC1\xBF"), 2u);
  EXPECT_EQ(find_invalid_utf8("abcdefgh\xE4\xB8"), 8u);  // truncated at the end
  try {
    check_utf8("ok\xFFno", "the prompt");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "invalid UTF-8 in the prompt at byte offset 2 (byte 0xFF)");
  }
}

TEST(TokenizerUtf8, DecodesAndEncodesCodePoints) {
  for (char32_t cp : {0x24u, 0xA2u, 0x939u, 0x20ACu, 0xD55Cu, 0x10348u, 0x10FFFFu}) {
    std::string s;
    append_utf8(s, cp);
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    EXPECT_EQ(uint32_t(next_code_point(p)), uint32_t(cp));
    EXPECT_EQ(p, reinterpret_cast<const unsigned char*>(s.data()) + s.size());
  }
}

TEST(TokenizerUtf8, Nfc) {
  EXPECT_EQ(nfc("e\xCC\x81"), "\xC3\xA9");                     // e + combining acute -> é
  EXPECT_EQ(nfc("\xE2\x84\xAB"), "\xC3\x85");                  // ANGSTROM SIGN -> Å
  EXPECT_EQ(nfc("\xE1\x84\x80\xE1\x85\xA1"), "\xEA\xB0\x80");  // Hangul jamo compose
  EXPECT_EQ(nfc("already NFC: caf\xC3\xA9"), "already NFC: caf\xC3\xA9");
  EXPECT_TRUE(nfc_is_trivial("caf\xC3\xA9 \xC2\xA9"));
  EXPECT_FALSE(nfc_is_trivial("e\xCC\x81"));
}

TEST(TokenizerUtf8, NfcFastPathIsSoundBelowU0300) {
  // The fast path claims text made only of code points below U+0300 is already NFC. Check it
  // against utf8proc for every such code point alone and after each possible base letter.
  for (char32_t cp = 1; cp < 0x300; ++cp) {
    std::string s;
    append_utf8(s, cp);
    for (std::string text : {s, "a" + s, s + "a", s + s}) {
      ASSERT_TRUE(nfc_is_trivial(text));
      auto* out = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(text.c_str()));
      ASSERT_NE(out, nullptr);
      EXPECT_EQ(std::string(reinterpret_cast<char*>(out)), text)
          << "U+" << std::hex << uint32_t(cp);
      std::free(out);
    }
  }
}

TEST(TokenizerUtf8, NfcInStretchesEqualsWholeText) {
  // nfc() only normalises the stretches around non-trivial code points; utf8proc on the whole
  // text is the reference.
  for (std::string text :
       {"e\u0301 x a\u0308\u0301b \u1100\u1161 abc \u00e9\u0301\u0323", "\u0301start",
        "end e\u0301", "\u212b\u212b", "ab\u00e9\u00e9\u0301cd\u0327e\u0301",
        "\u0958 \u0915\u093c x\u0345\u0301 \ufb01", "x\u00a0\u0301 \u0385", "plain"}) {
    auto* whole = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(text.c_str()));
    ASSERT_NE(whole, nullptr);
    EXPECT_EQ(nfc(text), std::string(reinterpret_cast<char*>(whole))) << text;
    std::free(whole);
  }
}

TEST(TokenizerUtf8, TakeCompleteCharacters) {
  std::string pending = "ab\xE4\xB8";
  EXPECT_EQ(take_complete_utf8(pending, false), "ab");
  EXPECT_EQ(pending, "\xE4\xB8");
  pending += "\xAD";
  EXPECT_EQ(take_complete_utf8(pending, false), "\xE4\xB8\xAD");
  EXPECT_EQ(pending, "");
  pending = "\xE4\xB8x";  // impossible: one U+FFFD for the maximal subpart, then x
  EXPECT_EQ(take_complete_utf8(pending, false), "\xEF\xBF\xBDx");
  pending = "\xF0\x9F";
  EXPECT_EQ(take_complete_utf8(pending, false), "");
  EXPECT_EQ(take_complete_utf8(pending, true), "\xEF\xBF\xBD");
  EXPECT_EQ(pending, "");
  pending = "\xC0\xAF";  // each byte of an overlong is its own ill-formed subpart
  EXPECT_EQ(take_complete_utf8(pending, false), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(TokenizerByteMap, Gpt2Table) {
  const auto& map = byte_to_code_point();
  EXPECT_EQ(uint32_t(map[' ']), 0x120u);   // Ġ
  EXPECT_EQ(uint32_t(map['\n']), 0x10Au);  // Ċ
  EXPECT_EQ(uint32_t(map['A']), uint32_t('A'));
  EXPECT_EQ(uint32_t(map[0xAD]), 0x143u);  // the last non-printable byte
  for (int b = 0; b < 256; ++b) EXPECT_EQ(code_point_to_byte(map[b]), b);
  EXPECT_EQ(code_point_to_byte(0x144), -1);
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  EXPECT_EQ(byte_level_to_bytes(bytes_to_byte_level(all)), all);
  EXPECT_EQ(byte_level_to_bytes("\xE4\xBD\xA0"), std::nullopt);  // U+4F60 is not in the map
}

}  // namespace
}  // namespace fak
