#include "quant/quant_type.h"

#include <array>
#include <cctype>
#include <string>

#include "core/error.h"
#include "quant/quant_blocks.h"

namespace fak {

namespace {

struct Info {
  QuantType type;
  std::string_view name;
  int block_size;
  size_t block_bytes;
};

constexpr std::array<Info, 14> kInfos{{
    {QuantType::Q4_0, "q4_0", quant::kQK, sizeof(quant::BlockQ4_0)},
    {QuantType::Q4_1, "q4_1", quant::kQK, sizeof(quant::BlockQ4_1)},
    {QuantType::Q5_0, "q5_0", quant::kQK, sizeof(quant::BlockQ5_0)},
    {QuantType::Q5_1, "q5_1", quant::kQK, sizeof(quant::BlockQ5_1)},
    {QuantType::Q8_0, "q8_0", quant::kQK, sizeof(quant::BlockQ8_0)},
    {QuantType::Q2_K, "q2_k", quant::kQKK, sizeof(quant::BlockQ2K)},
    {QuantType::Q3_K, "q3_k", quant::kQKK, sizeof(quant::BlockQ3K)},
    {QuantType::Q4_K, "q4_k", quant::kQKK, sizeof(quant::BlockQ4K)},
    {QuantType::Q5_K, "q5_k", quant::kQKK, sizeof(quant::BlockQ5K)},
    {QuantType::Q6_K, "q6_k", quant::kQKK, sizeof(quant::BlockQ6K)},
    {QuantType::Q8_K, "q8_k", quant::kQKK, sizeof(quant::BlockQ8K)},
    {QuantType::IQ4_NL, "iq4_nl", quant::kQK, sizeof(quant::BlockIq4Nl)},
    {QuantType::IQ4_XS, "iq4_xs", quant::kQKK, sizeof(quant::BlockIq4Xs)},
    {QuantType::MXFP4, "mxfp4", quant::kQK, sizeof(quant::BlockMxfp4)},
}};

constexpr std::array<QuantType, 14> kTypes{
    QuantType::Q4_0, QuantType::Q4_1,  QuantType::Q5_0,   QuantType::Q5_1,  QuantType::Q8_0,
    QuantType::Q2_K, QuantType::Q3_K,  QuantType::Q4_K,   QuantType::Q5_K,  QuantType::Q6_K,
    QuantType::Q8_K, QuantType::MXFP4, QuantType::IQ4_NL, QuantType::IQ4_XS};

const Info& info(QuantType t) {
  for (const Info& i : kInfos)
    if (i.type == t) return i;
  fail("unknown quant type id " + std::to_string(uint32_t(t)));
}

}  // namespace

std::span<const QuantType> all_quant_types() {
  return kTypes;
}

std::string_view quant_type_name(QuantType t) {
  return info(t).name;
}

std::optional<QuantType> quant_type_from_name(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  for (const Info& i : kInfos)
    if (i.name == lower) return i.type;
  return std::nullopt;
}

std::optional<QuantType> quant_type_from_ggml(uint32_t id) {
  for (const Info& i : kInfos)
    if (uint32_t(i.type) == id) return i.type;
  return std::nullopt;
}

int quant_block_size(QuantType t) {
  return info(t).block_size;
}
size_t quant_block_bytes(QuantType t) {
  return info(t).block_bytes;
}

size_t row_bytes(QuantType t, int64_t n) {
  const Info& i = info(t);
  check(n >= 0 && n % i.block_size == 0, std::string(i.name) + " row of " + std::to_string(n) +
                                             " elements is not a multiple of " +
                                             std::to_string(i.block_size));
  return size_t(n / i.block_size) * i.block_bytes;
}

QuantType dot_activation_type(QuantType t) {
  return info(t).block_size == quant::kQKK ? QuantType::Q8_K : QuantType::Q8_0;
}

}  // namespace fak
