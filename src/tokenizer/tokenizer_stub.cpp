// TEMPORARY: replaced by the real tokenizer at merge.
#include "core/error.h"
#include "tokenizer/tokenizer.h"
namespace fak {
struct Tokenizer::Impl {};
Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;
Tokenizer Tokenizer::from_dir(const std::filesystem::path&) { fail("tokenizer stub"); }
std::vector<int32_t> Tokenizer::encode(std::string_view, bool) const { fail("tokenizer stub"); }
std::string Tokenizer::decode(std::span<const int32_t>, bool) const { fail("tokenizer stub"); }
std::string Tokenizer::token_bytes(int32_t) const { fail("tokenizer stub"); }
int32_t Tokenizer::vocab_size() const { return 0; }
bool Tokenizer::is_special(int32_t) const { return false; }
StreamDecoder::StreamDecoder(const Tokenizer& t, bool s) : tokenizer_(t), skip_special_(s) {}
std::string StreamDecoder::push(int32_t) { return {}; }
std::string StreamDecoder::flush() { return {}; }
}  // namespace fak
namespace fak { const TokenizerSpec& Tokenizer::spec() const { static TokenizerSpec s; return s; } }
