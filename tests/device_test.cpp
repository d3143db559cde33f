// Device selection and the KV storage seam: --device parsing, a clear refusal where a device is
// not available (this build or this machine), and KvCache's staged paths (what GPU storage goes
// through) giving the same bytes as host storage.
#include "backend/device.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/error.h"
#include "memory/kv_cache.h"
#include "models/model.h"
#include "runtime/session.h"
#include "test_util.h"

namespace fak {

namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Host memory that claims not to be: KvCache must then move every byte through copy_2d, as it
// does for GPU memory. Counts the copies so the test knows the staged paths ran.
class OpaqueStorage final : public KvStorage {
 public:
  std::string name() const override { return "opaque-test-device"; }
  bool host_accessible() const override { return false; }
  uint8_t* map_slab(size_t bytes, const char* what) override {
    return host_->map_slab(bytes, what);
  }
  void unmap_slab(uint8_t* slab, size_t bytes) noexcept override { host_->unmap_slab(slab, bytes); }
  void copy_2d(CopyKind kind, void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
               size_t width, size_t height) override {
    ++copies;
    host_->copy_2d(kind, dst, dst_pitch, src, src_pitch, width, height);
  }
  int copies = 0;

 private:
  std::shared_ptr<KvStorage> host_ = host_kv_storage();
};

}  // namespace

TEST(Device, ParsesTheAcceptedForms) {
  EXPECT_EQ(parse_device("cpu"), Device{});
  EXPECT_EQ(parse_device("cuda"), (Device{DeviceKind::Cuda, 0}));
  EXPECT_EQ(parse_device("cuda:3"), (Device{DeviceKind::Cuda, 3}));
  EXPECT_EQ(parse_device("cuda:3").name(), "cuda:3");
  EXPECT_EQ(Device{}.name(), "cpu");
  for (const char* bad :
       {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:1x", "CPU", "", "cuda:99999"}) {
    const std::string e = error_of([&] { parse_device(bad); });
    EXPECT_NE(e.find("cpu, cuda, cuda:N"), std::string::npos) << bad << ": " << e;
  }
  EXPECT_TRUE(device_unavailable_reason(Device{}).empty());
}

// Where CUDA cannot run (a build without it, or no GPU), loading on it fails at once with the
// reason, naming the device; nothing is half-loaded.
TEST(Device, UnavailableCudaIsRefusedNamingWhy) {
  const Device cuda{DeviceKind::Cuda, 0};
  const std::string why = device_unavailable_reason(cuda);
  if (why.empty()) {
    GTEST_SKIP() << "a CUDA device is here: the *_cuda parity and reuse tests run";
  }
  if (!cuda_compiled()) {
    EXPECT_NE(why.find("-DFAK_CUDA=ON"), std::string::npos) << why;
  }
  const std::string e = error_of([&] {
    Model::load(test::source_path("models/pycoder-6m"), {.load_tokenizer = false, .device = cuda});
  });
  EXPECT_NE(e.find("--device cuda:0"), std::string::npos) << e;
  EXPECT_NE(e.find(why), std::string::npos) << e;

  auto r = test::run_fak("run --device cuda -n 2 -p 'def f'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
  auto bad = test::run_fak("run --device tpu -n 2 -p 'def f'");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("cpu, cuda, cuda:N"), std::string::npos) << bad.err;
}

// Every KvCache operation through copy_2d (as on a GPU) leaves the same bytes as host storage.
TEST(KvStorageSeam, StagedPathsMatchHostStorage) {
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    auto opaque = std::make_shared<OpaqueStorage>();
    const KvCacheOptions base{.block_size = 4, .keep_kraw = true, .dtype = dt, .slab_bytes = 1};
    KvCacheOptions o = base;
    o.storage = opaque;
    KvCache host(2, 3, 8, base), dev(2, 3, 8, o);
    ASSERT_EQ(&dev.storage(), opaque.get());
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-2, 2);
    std::vector<int32_t> hb, db;
    for (int b = 0; b < 3; ++b) {
      hb.push_back(host.allocate());
      db.push_back(dev.allocate());
    }
    std::vector<float> row(24);
    for (int b = 0; b < 3; ++b)
      for (int l = 0; l < 2; ++l)
        for (KvPlane p : {KvPlane::K, KvPlane::V, KvPlane::Kraw})
          for (int s = 0; s < 4; ++s) {
            for (float& v : row) v = u(rng);
            host.store_row(hb[size_t(b)], l, p, s, row.data());
            dev.store_row(db[size_t(b)], l, p, s, row.data());
          }
    // Edits: a row moved within and across blocks, a block copied, rows written in bulk.
    host.move_row(hb[0], 1, hb[2], 3, 1, KvPlane::K);
    dev.move_row(db[0], 1, db[2], 3, 1, KvPlane::K);
    host.move_row(hb[1], 0, hb[1], 2, 0, KvPlane::Kraw);
    dev.move_row(db[1], 0, db[1], 2, 0, KvPlane::Kraw);
    hb.push_back(host.copy_block(hb[1], 3));
    db.push_back(dev.copy_block(db[1], 3));
    std::vector<uint8_t> bulk(3 * host.row_bytes());
    for (auto& byte : bulk) byte = uint8_t(rng());
    host.write_rows(hb[2], 0, KvPlane::V, 3, bulk.data());
    dev.write_rows(db[2], 0, KvPlane::V, 3, bulk.data());

    std::vector<uint8_t> want(4 * host.row_bytes()), got(want.size());
    std::vector<float> fw(24), fg(24);
    for (size_t b = 0; b < hb.size(); ++b)
      for (int l = 0; l < 2; ++l)
        for (KvPlane p : {KvPlane::K, KvPlane::V, KvPlane::Kraw}) {
          const int n = b == 3 ? 3 : 4;
          host.read_rows(hb[b], l, p, n, want.data());
          dev.read_rows(db[b], l, p, n, got.data());
          ASSERT_EQ(0, std::memcmp(want.data(), got.data(), size_t(n) * host.row_bytes()))
              << kv_type_name(dt) << " block " << b << " layer " << l << " plane " << int(p);
          for (int s = 0; s < n; ++s) {
            host.load_row(hb[b], l, p, s, fw.data());
            dev.load_row(db[b], l, p, s, fg.data());
            ASSERT_EQ(0, std::memcmp(fw.data(), fg.data(), fw.size() * sizeof(float)));
          }
        }
    EXPECT_GT(opaque->copies, 100);
  }
}

// The CPU forward reads rows in place: it refuses a cache it cannot read, naming where it lives.
TEST(KvStorageSeam, CpuForwardRefusesACacheItCannotRead) {
  auto model = Model::load(test::source_path("models/pycoder-6m"), {.load_tokenizer = false});
  auto cache = std::make_shared<KvCache>(
      model->n_attention_layers(), model->config().n_kv_heads, model->config().head_dim,
      KvCacheOptions{.storage = std::make_shared<OpaqueStorage>()});
  Session s(model, cache);
  const std::vector<int32_t> ids{1, 2, 3};
  const std::string e = error_of([&] { s.append(ids); });
  EXPECT_NE(e.find("opaque-test-device"), std::string::npos) << e;
  EXPECT_EQ(model->make_kv_storage()->name(), "host");
}

}  // namespace fak
