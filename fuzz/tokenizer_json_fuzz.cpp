// libFuzzer: arbitrary bytes as tokenizer.json. Loading must either succeed or throw fak::Error;
// a tokenizer that loads must then encode and decode without crashing.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  try {
    fak::Tokenizer tok = fak::Tokenizer::from_json(input);
    for (std::string_view text :
         {std::string_view("Hello, world! <|im_start|>x  \n\n12 caf\xC3\xA9"),
          input.substr(0, 64)}) {
      try {
        std::vector<int32_t> ids = tok.encode(text);
        std::string back = tok.decode(ids);
        fak::StreamDecoder stream(tok);
        for (int32_t id : ids) stream.push(id);
        stream.flush();
      } catch (const fak::Error&) {  // e.g. the second text is not valid UTF-8
      }
    }
    tok.vocab_size();
  } catch (const fak::Error&) {
  }
  return 0;
}
