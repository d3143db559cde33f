// GGUF reader and writer: round trip of every metadata type and several tensor types, hand-built v2
// files, and truncated / corrupted files that must give a fak::Error naming file and culprit.
#include "io/gguf.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "core/dtype.h"
#include "core/error.h"
#include "io/ggml_type.h"
#include "io/gguf_writer.h"
#include "quant/quant.h"
#include "test_util.h"

namespace fak {
namespace {

// Hand assembly of GGUF bytes, for versions and corruptions the writer never produces.
struct Bytes {
  std::string b;
  template <typename T>
  Bytes& put(T v) {
    b.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  Bytes& u32(uint32_t v) { return put(v); }
  Bytes& u64(uint64_t v) { return put(v); }
  Bytes& str(const std::string& s) {
    u64(s.size());
    b += s;
    return *this;
  }
  Bytes& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    return u32(0x46554747).u32(version).u64(n_tensors).u64(n_kv);
  }
  Bytes& kv_u32(const std::string& key, uint32_t v) { return str(key).u32(4).u32(v); }
  Bytes& tensor(const std::string& name, std::vector<int64_t> dims, uint32_t type,
                uint64_t offset) {
    str(name).u32(uint32_t(dims.size()));
    for (int64_t d : dims) put<int64_t>(d);
    return u32(type).u64(offset);
  }
  Bytes& pad(size_t align) {
    b.resize((b.size() + align - 1) / align * align, '\0');
    return *this;
  }
  Bytes& zeros(size_t n) {
    b.append(n, '\0');
    return *this;
  }
  std::span<const uint8_t> span() const {
    return {reinterpret_cast<const uint8_t*>(b.data()), b.size()};
  }
};

GgufFile parse(const Bytes& bytes, const std::string& name = "corrupt.gguf") {
  return GgufFile::from_memory(bytes.span(), name);
}

// The error must name the file and the culprit.
void expect_error(const Bytes& bytes, const std::string& needle) {
  try {
    parse(bytes);
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("corrupt.gguf"), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << "expected '" << needle << "' in: " << msg;
  }
}

std::vector<uint8_t> as_bytes(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  return {b, b + n};
}

TEST(GgufTypes, GgmlTypeIdsMatchGgml) {
  struct Expect {
    uint32_t id;
    const char* name;
    int64_t block;
    size_t bytes;
  };
  const Expect expect[] = {{0, "f32", 1, 4},       {1, "f16", 1, 2},       {2, "q4_0", 32, 18},
                           {3, "q4_1", 32, 20},    {6, "q5_0", 32, 22},    {7, "q5_1", 32, 24},
                           {8, "q8_0", 32, 34},    {9, "q8_1", 32, 36},    {10, "q2_K", 256, 84},
                           {11, "q3_K", 256, 110}, {12, "q4_K", 256, 144}, {13, "q5_K", 256, 176},
                           {14, "q6_K", 256, 210}, {15, "q8_K", 256, 292}, {30, "bf16", 1, 2}};
  for (const Expect& e : expect) {
    const GgmlTypeInfo* t = ggml_type_info(e.id);
    ASSERT_NE(t, nullptr) << e.id;
    EXPECT_EQ(t->name, e.name);
    EXPECT_EQ(t->block_size, e.block);
    EXPECT_EQ(t->block_bytes, e.bytes);
  }
  for (uint32_t removed : {4u, 5u, 31u, 40u, 1000u}) EXPECT_EQ(ggml_type_info(removed), nullptr);
}

class GgufRoundTrip : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = test::temp_dir();
    std::mt19937 rng(5);
    std::normal_distribution<float> dist;
    for (int i = 0; i < 24; ++i) f32.push_back(dist(rng));
    for (int i = 0; i < 16; ++i) f16.push_back(f32_to_f16(dist(rng)));
    std::vector<float> x(512);
    for (float& v : x) v = dist(rng);
    q8.resize(row_bytes(QuantType::Q8_0, 128));
    quantize_row(QuantType::Q8_0, x.data(), q8.data(), 128);
    q4k.resize(row_bytes(QuantType::Q4_K, 512));
    quantize_row(QuantType::Q4_K, x.data(), q4k.data(), 512);
    q6k.resize(row_bytes(QuantType::Q6_K, 256));
    quantize_row(QuantType::Q6_K, x.data(), q6k.data(), 256);
  }
  std::filesystem::path dir;
  std::vector<float> f32;
  std::vector<uint16_t> f16;
  std::vector<uint8_t> q8, q4k, q6k;
};

TEST_F(GgufRoundTrip, EveryMetadataTypeAndSeveralTensorTypes) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::make_string("llama"));
  w.set("t.u8", GgufValue::make_u8(200));
  w.set("t.i8", GgufValue::make_i8(-100));
  w.set("t.u16", GgufValue::make_u16(60000));
  w.set("t.i16", GgufValue::make_i16(-30000));
  w.set("t.u32", GgufValue::make_u32(4000000000u));
  w.set("t.i32", GgufValue::make_i32(-2000000000));
  w.set("t.u64", GgufValue::make_u64(1ull << 63));
  w.set("t.i64", GgufValue::make_i64(-(1ll << 62)));
  w.set("t.f32", GgufValue::make_f32(1.5e-3f));
  w.set("t.f64", GgufValue::make_f64(-2.25e100));
  w.set("t.bool", GgufValue::make_bool(true));
  w.set("t.empty_string", GgufValue::make_string(""));
  w.set("t.utf8", GgufValue::make_string("h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c\0x"));
  const int32_t ints[] = {1, -2, 3};
  w.set("t.arr_i32", GgufValue::make_array(GgufArray::numbers(GgufType::I32, ints, 3)));
  const float floats[] = {0.5f, -1.0f};
  w.set("t.arr_f32", GgufValue::make_array(GgufArray::numbers(GgufType::F32, floats, 2)));
  const uint8_t bools[] = {1, 0, 1};
  w.set("t.arr_bool", GgufValue::make_array(GgufArray::numbers(GgufType::BOOL, bools, 3)));
  w.set("t.arr_str", GgufValue::make_array(GgufArray::of_strings({"a", "", "\xc4\xa0the"})));
  w.set("t.arr_empty", GgufValue::make_array(GgufArray::numbers(GgufType::U64, nullptr, 0)));
  const uint16_t u16s[] = {7, 8};
  w.set("t.arr_nested",
        GgufValue::make_array(GgufArray::of_arrays(
            {GgufArray::numbers(GgufType::U16, u16s, 2), GgufArray::of_strings({"x"}),
             GgufArray::of_arrays({GgufArray::numbers(GgufType::U16, u16s, 1)})})));
  w.set_u32("t.replaced", 1);
  w.set_u32("t.replaced", 2);

  // note: the writer keeps spans, so the bytes must outlive write().
  const auto f32_bytes = as_bytes(f32.data(), f32.size() * 4);
  const auto f16_bytes = as_bytes(f16.data(), f16.size() * 2);
  w.add_tensor("f32", 0, {8, 3}, f32_bytes);
  w.add_tensor("f16", 1, {16}, f16_bytes);
  w.add_tensor("q8", 8, {64, 2}, q8);
  w.add_tensor("q4k", 12, {256, 1, 2}, q4k);
  w.add_tensor("q6k", 14, {256}, q6k);
  const auto path = dir / "model.gguf";
  w.write(path);

  const GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.metadata().size(), 21u);
  EXPECT_EQ(f.metadata()[0].key, "general.architecture");
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.find("t.u8")->type, GgufType::U8);
  EXPECT_EQ(f.get_u32("t.u8"), 200u);
  EXPECT_EQ(f.get_i64("t.i8"), -100);
  EXPECT_EQ(f.get_u32("t.u16"), 60000u);
  EXPECT_EQ(f.get_i64("t.i16"), -30000);
  EXPECT_EQ(f.get_u32("t.u32"), 4000000000u);
  EXPECT_EQ(f.get_i64("t.i32"), -2000000000);
  EXPECT_EQ(f.get_u64("t.u64"), 1ull << 63);
  EXPECT_EQ(f.get_i64("t.i64"), -(1ll << 62));
  EXPECT_EQ(f.get_f32("t.f32"), 1.5e-3f);
  EXPECT_EQ(f.find("t.f64")->f, -2.25e100);
  EXPECT_TRUE(f.get_bool("t.bool"));
  EXPECT_EQ(f.get_string("t.empty_string"), "");
  EXPECT_EQ(f.get_string("t.utf8"), std::string("h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c\0x"));
  const GgufArray& ai = f.get_array("t.arr_i32");
  ASSERT_EQ(ai.size(), 3u);
  EXPECT_EQ(ai.type, GgufType::I32);
  EXPECT_EQ(ai.i64(1), -2);
  EXPECT_EQ(ai.u64(2), 3u);
  EXPECT_THROW(ai.u64(1), Error);
  EXPECT_THROW(ai.i64(3), Error);
  EXPECT_EQ(f.get_array("t.arr_f32").f64(0), 0.5);
  EXPECT_EQ(f.get_array("t.arr_bool").u64(2), 1u);
  EXPECT_EQ(f.get_array("t.arr_str").strings, (std::vector<std::string>{"a", "", "\xc4\xa0the"}));
  EXPECT_EQ(f.get_array("t.arr_empty").size(), 0u);
  EXPECT_EQ(f.get_array("t.arr_empty").type, GgufType::U64);
  const GgufArray& nested = f.get_array("t.arr_nested");
  ASSERT_EQ(nested.size(), 3u);
  EXPECT_EQ(nested.arrays[0].u64(1), 8u);
  EXPECT_EQ(nested.arrays[1].strings[0], "x");
  EXPECT_EQ(nested.arrays[2].arrays[0].u64(0), 7u);
  EXPECT_EQ(f.get_u32("t.replaced"), 2u);

  ASSERT_EQ(f.tensors().size(), 5u);
  struct Expect {
    const char* name;
    uint32_t type;
    std::vector<int64_t> dims;
    std::vector<uint8_t> bytes;
  };
  const Expect expect[] = {{"f32", 0, {8, 3}, as_bytes(f32.data(), f32.size() * 4)},
                           {"f16", 1, {16}, as_bytes(f16.data(), f16.size() * 2)},
                           {"q8", 8, {64, 2}, q8},
                           {"q4k", 12, {256, 1, 2}, q4k},
                           {"q6k", 14, {256}, q6k}};
  for (const Expect& e : expect) {
    const GgufTensor* t = f.tensor(e.name);
    ASSERT_NE(t, nullptr) << e.name;
    EXPECT_EQ(t->ggml_type, e.type);
    EXPECT_EQ(t->dims, e.dims);
    ASSERT_EQ(t->nbytes, e.bytes.size());
    EXPECT_EQ(0, std::memcmp(t->data, e.bytes.data(), t->nbytes)) << e.name;
    EXPECT_EQ((t->data - f.tensor("f32")->data) % 32, 0) << e.name;
    EXPECT_EQ(t->offset % 32, 0u);
  }
  EXPECT_EQ(f.tensor("q4k")->n_elements(), 512);
  EXPECT_EQ(f.tensor("missing"), nullptr);
  EXPECT_EQ(f.data_offset() % 32, 0u);

  // No temp file is left next to the result.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    files += entry.is_regular_file();
  EXPECT_EQ(files, 1);
}

// A file kept for its tensors frees its metadata arrays: each reads as empty (its element type
// kept), every other value and every tensor's bytes stay as they were.
TEST_F(GgufRoundTrip, ReleasedArraysReadEmptyAndTheRestStays) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::make_string("llama"));
  w.set_u32("t.u32", 7);
  w.set("t.tokens", GgufValue::make_array(GgufArray::of_strings({"a", "b", "\xc4\xa0the"})));
  const int32_t ints[] = {1, -2, 3};
  w.set("t.ints", GgufValue::make_array(GgufArray::numbers(GgufType::I32, ints, 3)));
  w.add_tensor("q8", 8, {64, 2}, q8);
  const auto path = dir / "released.gguf";
  w.write(path);
  GgufFile f = GgufFile::open(path);
  ASSERT_EQ(f.get_array("t.tokens").size(), 3u);
  f.release_arrays();
  EXPECT_EQ(f.get_array("t.tokens").size(), 0u);
  EXPECT_EQ(f.get_array("t.tokens").type, GgufType::STRING);
  EXPECT_EQ(f.get_array("t.ints").size(), 0u);
  EXPECT_EQ(f.get_array("t.ints").type, GgufType::I32);
  EXPECT_EQ(f.get_u32("t.u32"), 7u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  const GgufTensor* t = f.tensor("q8");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->nbytes, q8.size());
  EXPECT_EQ(0, std::memcmp(t->data, q8.data(), q8.size()));
}

TEST_F(GgufRoundTrip, TypedGettersNameFileAndKey) {
  GgufWriter w;
  w.set_i32("neg", -1);
  w.set_i32("pos", 7);
  w.set_u64("big", 1ull << 40);
  w.set_string("s", "x");
  const auto path = dir / "g.gguf";
  w.write(path);
  const GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.get_u32("pos"), 7u);
  EXPECT_EQ(f.get_u32_or("absent", 9), 9u);
  EXPECT_EQ(f.get_f32_or("absent", 0.5f), 0.5f);
  auto message = [&](auto fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string missing = message([&] { f.get_u32("llama.block_count"); });
  EXPECT_NE(missing.find("g.gguf"), std::string::npos) << missing;
  EXPECT_NE(missing.find("'llama.block_count' is missing"), std::string::npos) << missing;
  EXPECT_NE(message([&] { f.get_u32("neg"); }).find("'neg'"), std::string::npos);
  EXPECT_NE(message([&] { f.get_u32("big"); }).find("exceeds u32"), std::string::npos);
  EXPECT_NE(message([&] { f.get_f32("s"); }).find("expected a float"), std::string::npos);
  EXPECT_NE(message([&] { f.get_string("pos"); }).find("expected a string"), std::string::npos);
  EXPECT_THROW(f.get_array("s"), Error);
  EXPECT_THROW(f.get_bool("s"), Error);
}

TEST_F(GgufRoundTrip, CustomAlignmentIsHonoured) {
  GgufWriter w;
  w.set_u32("general.alignment", 64);
  const auto bytes = as_bytes(f32.data(), 20);
  w.add_tensor("a", 0, {3}, std::span<const uint8_t>(bytes).first(12));
  w.add_tensor("b", 0, {5}, bytes);
  w.write(dir / "a.gguf");
  const GgufFile f = GgufFile::open(dir / "a.gguf");
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(f.tensor("b")->offset, 64u);
  EXPECT_EQ(0, std::memcmp(f.tensor("b")->data, f32.data(), 20));
}

// Cutting the file anywhere before the end of the last tensor's data must be an error.
TEST_F(GgufRoundTrip, TruncationAtEveryPositionIsAnError) {
  GgufWriter w;
  w.set_string("general.name", "tiny");
  w.set("arr", GgufValue::make_array(GgufArray::of_strings({"ab", "cde"})));
  w.set_f32("eps", 1e-5f);
  const auto f32_bytes = as_bytes(f32.data(), f32.size() * 4);
  w.add_tensor("f32", 0, {8, 3}, f32_bytes);
  w.add_tensor("q8", 8, {64, 2}, q8);
  w.write(dir / "t.gguf");
  const std::string full = test::read_file(dir / "t.gguf");
  const GgufFile whole =
      GgufFile::from_memory({reinterpret_cast<const uint8_t*>(full.data()), full.size()}, "t.gguf");
  const GgufTensor* last = whole.tensor("q8");
  const size_t needed =
      size_t(last->data - reinterpret_cast<const uint8_t*>(full.data())) + last->nbytes;
  for (size_t len = 0; len < needed; ++len) {
    Bytes b;
    b.b = full.substr(0, len);
    EXPECT_THROW(parse(b), Error) << "prefix of " << len << " bytes";
  }
  Bytes b;
  b.b = full.substr(0, needed);  // the trailing padding after the last tensor is optional
  EXPECT_NO_THROW(parse(b));
}

TEST(GgufRead, HandBuiltVersion2File) {
  Bytes b;
  b.header(2, 2, 3)
      .kv_u32("general.alignment", 16)
      .str("general.name")
      .u32(8)
      .str("v2 model")
      .str("scores")
      .u32(9)
      .u32(6)
      .u64(2)
      .put<float>(0.25f)
      .put<float>(-4.0f)
      .tensor("w", {4, 2}, 0, 0)
      .tensor("b", {32}, 8, 32);
  b.pad(16);
  const size_t data_start = b.b.size();
  for (int i = 0; i < 8; ++i) b.put<float>(float(i));
  b.pad(16).pad(32);
  b.put<uint16_t>(f32_to_f16(2.0f));
  for (int i = 0; i < 32; ++i) b.put<int8_t>(int8_t(i - 16));
  const GgufFile f = parse(b, "v2.gguf");
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.alignment(), 16u);
  EXPECT_EQ(f.data_offset(), data_start);
  EXPECT_EQ(f.get_string("general.name"), "v2 model");
  EXPECT_EQ(f.get_array("scores").f64(1), -4.0);
  const GgufTensor* w = f.tensor("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->nbytes, 32u);
  float w5;
  std::memcpy(&w5, w->data + 20, 4);
  EXPECT_EQ(w5, 5.0f);
  const GgufTensor* q = f.tensor("b");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->nbytes, 34u);
  float deq[32];
  dequantize_row(QuantType::Q8_0, q->data, deq, 32);
  EXPECT_EQ(deq[0], -32.0f);
  EXPECT_EQ(deq[31], 30.0f);
}

// A valid base: one u32 kv and one f32 tensor of 4 elements.
Bytes valid_file() {
  Bytes b;
  b.header(3, 1, 1).kv_u32("k", 1).tensor("t", {4}, 0, 0).pad(32).zeros(16);
  return b;
}

TEST(GgufRead, CorruptHeadersAreErrors) {
  EXPECT_NO_THROW(parse(valid_file()));
  Bytes b = valid_file();
  b.b[0] = 'X';
  expect_error(b, "bad magic");
  b = valid_file();
  b.b[4] = 1;
  expect_error(b, "v1");
  b = valid_file();
  b.b[4] = 7;
  expect_error(b, "unsupported GGUF version 7");
  b = valid_file();
  b.b[4] = 0;
  b.b[7] = 3;
  expect_error(b, "big-endian");
  expect_error(Bytes().header(3, 1ull << 60, 0), "tensor count");
  expect_error(Bytes().header(3, 0, ~0ull), "metadata count");
  expect_error(Bytes().header(3, 0, 1).u64(~0ull >> 1).zeros(16), "truncated");  // key length lies
  expect_error(Bytes().header(3, 0, 1).str("k").u32(13).u32(0), "unknown metadata value type 13");
  expect_error(Bytes().header(3, 0, 1).str("k").u32(7).put<uint8_t>(2), "'k': bool value 2");
  expect_error(Bytes().header(3, 0, 1).str("arr").u32(9).u32(4).u64(1ull << 61),
               "'arr': array count");
  expect_error(Bytes().header(3, 0, 1).str("arr").u32(9).u32(8).u64(1ull << 40),
               "string array count");
  expect_error(Bytes().header(3, 0, 1).str("arr").u32(9).u32(8).u64(1).u64(100).zeros(10),
               "truncated");
  Bytes deep;
  deep.header(3, 0, 1).str("deep").u32(9);
  for (int i = 0; i < 20; ++i) deep.u32(9).u64(1);
  deep.u32(0).u64(0);
  expect_error(deep, "nested deeper");
  expect_error(Bytes().header(3, 0, 2).kv_u32("k", 1).kv_u32("k", 2), "'k': duplicate key");
  expect_error(Bytes().header(3, 0, 1).kv_u32("general.alignment", 0), "not a power of two");
  expect_error(Bytes().header(3, 0, 1).kv_u32("general.alignment", 48), "not a power of two");
  expect_error(Bytes().header(3, 0, 1).str("general.alignment").u32(8).str("32"), "must be u32");
}

TEST(GgufRead, CorruptTensorInfosAreErrors) {
  auto one = [](std::vector<int64_t> dims, uint32_t type, uint64_t offset, size_t data) {
    Bytes b;
    b.header(3, 1, 0).tensor("blk.0.w", dims, type, offset).pad(32).zeros(data);
    return b;
  };
  expect_error(one({4}, 4, 0, 64), "'blk.0.w': unknown ggml type id 4");
  expect_error(one({4}, 99, 0, 64), "unknown ggml type id 99");
  expect_error(one({1, 1, 1, 1, 1}, 0, 0, 64), "5 dimensions");
  expect_error(one({-4}, 0, 0, 64), "negative dimension");
  expect_error(one({33}, 8, 0, 64), "not a multiple of the q8_0 block size 32");
  expect_error(one({1ll << 40, 1ll << 40}, 0, 0, 64), "overflows");
  expect_error(one({4}, 0, 8, 64), "not a multiple of the alignment");
  expect_error(one({4}, 0, 0, 15), "extends past the end");
  expect_error(one({4}, 0, 1ull << 62, 64), "extends past the end");
  expect_error(one({1ll << 50}, 0, 0, 64), "extends past the end");
  EXPECT_NO_THROW(parse(one({4}, 0, 0, 16)));

  Bytes overlap;
  overlap.header(3, 2, 0).tensor("a", {16}, 0, 0).tensor("b", {8}, 0, 32).pad(32).zeros(64);
  expect_error(overlap, "tensors 'a' and 'b' overlap");
  Bytes dup;
  dup.header(3, 2, 0).tensor("a", {8}, 0, 0).tensor("a", {8}, 0, 32).pad(32).zeros(64);
  expect_error(dup, "'a': duplicate tensor name");
  Bytes truncated_name;
  truncated_name.header(3, 1, 0).u64(1000).zeros(30);
  expect_error(truncated_name, "tensor info 0: truncated");
}

TEST(GgufWrite, RejectsInconsistentTensors) {
  GgufWriter w;
  std::vector<uint8_t> bytes(34);
  EXPECT_THROW(w.add_tensor("x", 8, {32}, std::span<const uint8_t>(bytes).first(33)), Error);
  EXPECT_THROW(w.add_tensor("x", 8, {33}, bytes), Error);
  EXPECT_THROW(w.add_tensor("x", 5, {32}, bytes), Error);
  EXPECT_THROW(w.add_tensor("x", 8, {32, 1, 1, 1, 1}, bytes), Error);
  w.add_tensor("x", 8, {32}, bytes);
  EXPECT_THROW(w.add_tensor("x", 8, {32}, bytes), Error);
  w.set_u32("general.alignment", 24);
  EXPECT_THROW(w.write(test::temp_dir() / "bad.gguf"), Error);
}

TEST(GgufWrite, MissingDirectoryIsAnError) {
  GgufWriter w;
  w.set_u32("k", 1);
  EXPECT_THROW(w.write(test::temp_dir() / "no" / "such" / "dir.gguf"), Error);
}

// A write failure half way (here a file size limit, as a full disk would) must throw, remove the
// temp file and leave the previous file in place.
TEST(GgufWrite, WriteFailureLeavesNoHalfFile) {
  const auto dir = test::temp_dir();
  const auto path = dir / "m.gguf";
  test::write_file(path, "previous");
  std::vector<uint8_t> big(1 << 20, 7);
  GgufWriter w;
  w.add_tensor("big", 24, {int64_t(big.size())}, big);  // i8
  const std::string msg = test::error_with_file_size_limit(64 * 1024, [&] { w.write(path); });
  EXPECT_NE(msg.find("cannot write"), std::string::npos) << msg;
  EXPECT_NE(msg.find("m.gguf"), std::string::npos) << msg;
  EXPECT_EQ(test::read_file(path), "previous");
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    files += entry.is_regular_file();
  EXPECT_EQ(files, 1);
}

}  // namespace
}  // namespace fak
