#include "models/quant_policy.h"

#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "quant/quant.h"

namespace fak {

namespace {

struct Named {
  FileType type;
  const char* name;
};
constexpr Named kNames[] = {
    {FileType::F32, "f32"},       {FileType::F16, "f16"},
    {FileType::BF16, "bf16"},     {FileType::Q8_0, "q8_0"},
    {FileType::Q4_0, "q4_0"},     {FileType::Q4_1, "q4_1"},
    {FileType::Q5_0, "q5_0"},     {FileType::Q5_1, "q5_1"},
    {FileType::Q2_K, "q2_k"},     {FileType::Q3_K_M, "q3_k_m"},
    {FileType::Q4_K_M, "q4_k_m"}, {FileType::Q5_K_M, "q5_k_m"},
    {FileType::Q6_K, "q6_k"},     {FileType::IQ4_NL, "iq4_nl"},
    {FileType::IQ4_XS, "iq4_xs"}, {FileType::MXFP4_MOE, "mxfp4_moe"},
};

// llama.cpp's use_more_bits: the first and last eighth of the layers and every third in between.
bool use_more_bits(int layer, int n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

// The type llama.cpp falls back to when rows are no multiple of the K-quant super-block.
WType fallback(WType t) {
  switch (t) {
    case WType::Q2_K:
    case WType::Q3_K:
      return WType::Q4_0;
    case WType::IQ4_XS:
      return WType::IQ4_NL;
    case WType::Q4_K:
      return WType::Q5_0;
    case WType::Q5_K:
      return WType::Q5_1;
    case WType::Q6_K:
      return WType::Q8_0;
    default:
      return t;
  }
}

}  // namespace

FileType parse_file_type(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  std::string choices;
  for (const Named& n : kNames) {
    if (lower == n.name) return n.type;
    choices += std::string(choices.empty() ? "" : ", ") + n.name;
  }
  fail("unknown type '" + std::string(name) + "' (choose from: " + choices + ")");
}

std::string file_type_name(FileType t) {
  for (const Named& n : kNames)
    if (n.type == t) return n.name;
  return "?";
}

WType choose_wtype(FileType ft, std::string_view role, int layer, int n_layers, int64_t cols,
                   bool tied, int n_experts, int n_gqa) {
  WType base = WType::F16;
  if (ft == FileType::MXFP4_MOE) {
    // llama.cpp: the stacked experts (3-D tensors) MXFP4, everything else Q8_0 (F16 where rows
    // do not fit a 32-block).
    const bool experts = role.size() > 5 && role.substr(role.size() - 5) == "_exps";
    if (cols % 32 != 0) return WType::F16;
    return experts ? WType::MXFP4 : WType::Q8_0;
  }
  switch (ft) {
    case FileType::F32:
      return WType::F32;
    case FileType::F16:
      return WType::F16;
    case FileType::BF16:
      return WType::BF16;
    case FileType::Q8_0:
      base = WType::Q8_0;
      break;
    case FileType::Q4_0:
      base = WType::Q4_0;
      break;
    case FileType::Q4_1:
      base = WType::Q4_1;
      break;
    case FileType::Q5_0:
      base = WType::Q5_0;
      break;
    case FileType::Q5_1:
      base = WType::Q5_1;
      break;
    case FileType::Q4_K_M:
      base = WType::Q4_K;
      break;
    case FileType::Q5_K_M:
      base = WType::Q5_K;
      break;
    case FileType::Q6_K:
      base = WType::Q6_K;
      break;
    case FileType::Q2_K:
      base = WType::Q2_K;
      break;
    case FileType::Q3_K_M:
      base = WType::Q3_K;
      break;
    case FileType::IQ4_NL:
      base = WType::IQ4_NL;
      break;
    case FileType::IQ4_XS:
      base = WType::IQ4_XS;
      break;
    case FileType::MXFP4_MOE:
      break;  // above
  }
  WType t = base;
  const bool k_mix = ft == FileType::Q4_K_M || ft == FileType::Q5_K_M;
  const bool iq4_mix = ft == FileType::IQ4_NL || ft == FileType::IQ4_XS;
  const bool is_output = role == "output" || (tied && role == "token_embd");
  // llama.cpp's categories match substrings: every ffn_down* (experts and shared expert
  // included), and attn_v together with the DeltaNet's fused attn_qkv.
  const bool ffn_down = role.rfind("ffn_down", 0) == 0;
  const bool attn_v = role == "attn_v" || role == "attn_qkv";
  // Its rules for 8-expert models (Mixtral, and the tiny MoE fixtures): more bits for attention.
  const bool eight_experts = n_experts == 8;
  if (is_output) {
    // llama.cpp: the output matrix gets Q6_K unless the file is Q8_0 (or its rows do not fit the
    // file's base type, then Q8_0).
    if (cols % wtype_block(base) != 0) {
      t = WType::Q8_0;
    } else if (ft != FileType::Q8_0) {
      t = WType::Q6_K;
    }
  } else if (attn_v || role == "attn_k") {
    if (attn_v) {
      if (k_mix && use_more_bits(layer, n_layers)) t = WType::Q6_K;
      // llama.cpp counts attn_v tensors where fak passes the layer: the same for every model that
      // has one per layer.
      if (ft == FileType::Q2_K) t = n_gqa >= 4 ? WType::Q4_K : WType::Q3_K;
      if (ft == FileType::Q3_K_M) t = layer < 2 ? WType::Q5_K : WType::Q4_K;
      if (iq4_mix && n_gqa >= 4) t = WType::Q5_K;
    }
    if (eight_experts) t = WType::Q8_0;
  } else if (ffn_down) {
    if (k_mix && use_more_bits(layer, n_layers)) t = WType::Q6_K;
    if (ft == FileType::Q2_K) t = WType::Q3_K;
    if (ft == FileType::Q3_K_M) t = layer < n_layers / 16 ? WType::Q5_K : WType::Q4_K;
    if (iq4_mix && layer < n_layers / 8) t = WType::Q5_K;  // llama.cpp: without an imatrix
  } else if (role == "attn_output") {
    const bool low_mix = ft == FileType::Q2_K || ft == FileType::Q3_K_M || iq4_mix;
    if (eight_experts && (ft == FileType::Q4_K_M || low_mix)) t = WType::Q5_K;
    if (!eight_experts && ft == FileType::Q2_K) t = WType::Q3_K;
    if (!eight_experts && ft == FileType::Q3_K_M) t = WType::Q4_K;
  }
  if (cols % wtype_block(t) != 0) t = fallback(t);
  // Still no fit (e.g. 176 columns, not a multiple of 32): llama.cpp keeps such tensors in F16.
  if (cols % wtype_block(t) != 0) t = WType::F16;
  return t;
}

std::vector<uint8_t> convert_matrix(const WeightMatrix& src, WType type) {
  const size_t rb = wtype_row_bytes(type, src.cols);
  check(src.cols % wtype_block(type) == 0, "convert: a row of " + std::to_string(src.cols) +
                                               " does not fit " + std::string(wtype_name(type)));
  std::vector<uint8_t> out(rb * size_t(src.rows));
  const std::optional<QuantType> q = wtype_quant(type);
#pragma omp parallel
  {
    std::vector<float> row(static_cast<size_t>(src.cols));
#pragma omp for schedule(dynamic, 16)
    for (int64_t r = 0; r < src.rows; ++r) {
      dequantize_row(src, r, row.data());
      uint8_t* dst = out.data() + size_t(r) * rb;
      if (q) {
        quantize_row(*q, row.data(), dst, src.cols);
      } else if (type == WType::F32) {
        std::memcpy(dst, row.data(), 4 * row.size());
      } else {
        for (size_t k = 0; k < row.size(); ++k) {
          const uint16_t h = type == WType::F16 ? f32_to_f16(row[k]) : f32_to_bf16(row[k]);
          std::memcpy(dst + 2 * k, &h, 2);
        }
      }
    }
  }
  return out;
}

}  // namespace fak
