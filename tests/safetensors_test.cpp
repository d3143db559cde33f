// safetensors reader/writer: round trip, and every way a header can lie gives one clear error.
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "test_util.h"

namespace fak {

namespace {

std::string make_file(const std::string& header_json, size_t data_bytes) {
  std::string out;
  uint64_t n = header_json.size();
  out.append(reinterpret_cast<const char*>(&n), 8);
  out += header_json;
  out.append(data_bytes, '\0');
  return out;
}

std::string error_of(const std::string& bytes) {
  try {
    SafetensorsFile::from_memory(bytes, "t.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Safetensors, WriteReadRoundTrip) {
  auto dir = test::temp_dir();
  std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  std::vector<uint16_t> b = {0x3f80, 0x4000};
  std::vector<int64_t> c = {5, -7};
  write_safetensors(dir / "m.safetensors",
                    {{"a", DType::F32, {2, 3}, {reinterpret_cast<const char*>(a.data()), 24}},
                     {"b", DType::BF16, {2}, {reinterpret_cast<const char*>(b.data()), 4}},
                     {"c", DType::I64, {2}, {reinterpret_cast<const char*>(c.data()), 16}}},
                    {{"format", "pt"}});
  auto f = SafetensorsFile::open(dir / "m.safetensors");
  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(read_f32(*f.find("a")), a);
  EXPECT_EQ(read_f32(*f.find("b")), (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(read_i64(*f.find("c")), c);
  EXPECT_EQ(f.find("a")->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  int files = 0;  // the file alone, no temp file beside it
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    files += entry.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST(Safetensors, ShardedIndex) {
  auto dir = test::temp_dir();
  std::vector<float> a = {1, 2}, b = {3, 4, 5};
  write_safetensors(dir / "model-00001-of-00002.safetensors",
                    {{"x.a", DType::F32, {2}, {reinterpret_cast<const char*>(a.data()), 8}}});
  write_safetensors(dir / "model-00002-of-00002.safetensors",
                    {{"x.b", DType::F32, {3}, {reinterpret_cast<const char*>(b.data()), 12}}});
  test::write_file(dir / "model.safetensors.index.json",
                   R"({"metadata":{},"weight_map":{"x.a":"model-00001-of-00002.safetensors",)"
                   R"("x.b":"model-00002-of-00002.safetensors"}})");
  auto store = TensorStore::open_dir(dir);
  EXPECT_EQ(read_f32(store.get("x.b")), b);
  EXPECT_EQ(read_f32(store.get("x.a")), a);
  try {
    store.get("x.c");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing tensor 'x.c'"), std::string::npos);
  }
  test::write_file(dir / "model.safetensors.index.json",
                   R"({"weight_map":{"x.a":"../../etc/passwd"}})");
  EXPECT_THROW(TensorStore::open_dir(dir), Error);
  test::write_file(dir / "model.safetensors.index.json", R"({"weight_map":{"x.a":"model-00002-of-00002.safetensors"}})");
  EXPECT_THROW(TensorStore::open_dir(dir), Error);  // the shard does not hold x.a
}

TEST(Safetensors, HeaderLiesAreRefused) {
  const std::string good = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  EXPECT_EQ(error_of(make_file(good, 16)), "");
  EXPECT_NE(error_of("abc"), "");                      // shorter than the length prefix
  EXPECT_NE(error_of(make_file(good, 8)), "");         // data truncated
  std::string huge_len = make_file(good, 16);
  uint64_t lie = 1ull << 40;
  std::memcpy(huge_len.data(), &lie, 8);
  EXPECT_NE(error_of(huge_len).find("truncated"), std::string::npos);
  EXPECT_NE(error_of(make_file("{not json", 0)).find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of(make_file("[1,2]", 0)), "");
  EXPECT_NE(error_of(make_file(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", 16))
                .find("needs 16 bytes"),
            std::string::npos);
  EXPECT_NE(error_of(make_file(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]}})", 16)), "");
  EXPECT_NE(error_of(make_file(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[16,0]}})", 16)), "");
  EXPECT_NE(error_of(make_file(R"({"w":{"dtype":"Q9","shape":[2],"data_offsets":[0,2]}})", 2)).find("dtype"),
            std::string::npos);
  EXPECT_NE(error_of(make_file(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8)), "");
  EXPECT_NE(error_of(make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8)), "");
  EXPECT_NE(error_of(make_file(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8)),
            "");
  EXPECT_NE(error_of(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                               12))
                .find("overlap"),
            std::string::npos);
}

TEST(Safetensors, MissingFileNamesThePath) {
  try {
    SafetensorsFile::open("/nonexistent/model.safetensors");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model.safetensors"), std::string::npos);
  }
}

}  // namespace fak
