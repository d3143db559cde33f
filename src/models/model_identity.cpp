#include "models/model_identity.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <tuple>

#include "core/error.h"
#include "io/file_digest.h"

namespace fak {

namespace {

// Bump when the manifest's layout changes, so identities of two definitions never meet.
constexpr const char* kManifestTag = "fak-model-identity-v1\n";

}  // namespace

std::shared_ptr<ModelIdentitySource> ModelIdentitySource::hf_dir(
    const std::filesystem::path& dir, const std::vector<std::filesystem::path>& weight_files) {
  std::shared_ptr<ModelIdentitySource> s(new ModelIdentitySource());
  s->add("config", "config.json", dir / "config.json");
  const auto index = dir / "model.safetensors.index.json";
  const bool through_index = !std::filesystem::exists(dir / "model.safetensors");
  if (through_index && std::filesystem::exists(index))
    s->add("index", index.filename().string(), index);
  for (const auto& f : weight_files) s->add("weights", f.filename().string(), f);
  return s;
}

std::shared_ptr<ModelIdentitySource> ModelIdentitySource::gguf(const std::filesystem::path& file) {
  std::shared_ptr<ModelIdentitySource> s(new ModelIdentitySource());
  s->add("gguf", "", file);
  return s;
}

ModelIdentitySource::~ModelIdentitySource() {
  for (const Part& p : parts_) ::close(p.fd);
}

void ModelIdentitySource::add(std::string role, std::string name,
                              const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open " + path.string() + ": " + std::strerror(errno));
  parts_.push_back({std::move(role), std::move(name), path.string(), fd});
}

std::string ModelIdentitySource::compute(const std::filesystem::path& cache_dir) const {
  std::vector<const Part*> order;
  for (const Part& p : parts_) order.push_back(&p);
  std::sort(order.begin(), order.end(), [](const Part* a, const Part* b) {
    return std::tie(a->role, a->name) < std::tie(b->role, b->name);
  });
  std::string manifest = kManifestTag;
  for (const Part* p : order)
    manifest += p->role + " " + p->name + " " + file_digest_fd(p->fd, p->path, cache_dir) + "\n";
  if (!quant_.empty()) manifest += "quant " + quant_ + "\n";
  return sha256_hex(manifest.data(), manifest.size());
}

}  // namespace fak
