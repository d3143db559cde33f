// A model's identity: the name under which its KV blocks are shared (the Redis store namespace)
// and the key that session files and --cache-dir prefix-cache files are checked against. Two
// loads get one identity only when every byte that decides the model's output is the same.
//
// Threat model. Replicas that share an identity splice each other's KV blocks into their contexts;
// a wrong match is not an error message but garbage tokens (or, fed on purpose, tokens an attacker
// chose). The identity must therefore not collide for two checkpoints that differ anywhere:
//  - accidentally: a fine-tune of one shape differs only inside tensors; two GGUFs may differ only
//    in a metadata value (rope.freq_base, a norm epsilon). The former identity (64-bit FNV-1a of
//    the config, tensor names/shapes and 256-byte samples of each tensor, no GGUF metadata) let
//    both collide.
//  - maliciously: whoever can place a checkpoint where a fleet loads models (a shared model
//    folder, a mirror) can craft near-duplicates. A non-cryptographic hash (FNV, xxh3-128) admits
//    chosen collisions cheaply: its output is a linear-ish function an attacker can solve for.
//    SHA-256 has no known collision or second-preimage attack.
// Cost: SHA-256 runs at ~1.5-2 GB/s per core with SHA-NI (this CPU has it), over all cores in
// parallel, so a cold 20 GB checkpoint costs seconds, and the per-file digest cache
// (io/file_digest.h) makes every later start free. xxh3-128 would be faster but buys nothing that
// the cache does not already give, and loses the collision resistance above.
//
// The identity is hashed over:
//  - a Hugging Face directory: config.json, model.safetensors.index.json when the weights load
//    through it, and every safetensors file the weights come from, whole (header + data);
//  - a GGUF file: the whole file (metadata + tensor infos + data) as stored on disk, before any
//    in-memory rewrite of the loader; not its name (a renamed file is the same model);
//  - the --quant type of an HF load (the weights computed with are the converted ones).
// Each file's digest is tagged with its role and name in a text manifest in sorted order, and the
// identity is the lowercase hex SHA-256 of that manifest. Model::place_on appends "-cuda" for a
// device's forward, whose bits differ from the CPU's.
//
// Files are opened at load and hashed through those descriptors when the identity is first asked
// for (Model::identity is lazy): a file replaced on disk after the load does not lend its bytes to
// the identity of the model loaded before it.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace fak {

class ModelIdentitySource {
 public:
  // dir/config.json, the index when weight_files came through it, and weight_files.
  static std::shared_ptr<ModelIdentitySource> hf_dir(
      const std::filesystem::path& dir, const std::vector<std::filesystem::path>& weight_files);
  static std::shared_ptr<ModelIdentitySource> gguf(const std::filesystem::path& file);

  ~ModelIdentitySource();
  ModelIdentitySource(const ModelIdentitySource&) = delete;
  ModelIdentitySource& operator=(const ModelIdentitySource&) = delete;

  // Loading converted the weights to this type (`--quant`).
  void set_quant(std::string quant_type_name) { quant_ = std::move(quant_type_name); }

  // Lowercase hex SHA-256 (64 characters). Reads every file unless the digest cache in cache_dir
  // (io/file_digest.h; empty: none) knows it. Throws fak::Error when a file cannot be read.
  std::string compute(const std::filesystem::path& cache_dir) const;

 private:
  struct Part {
    std::string role, name;  // name: the file's name in the directory, empty for a GGUF
    std::string path;        // for messages
    int fd = -1;
  };
  ModelIdentitySource() = default;
  void add(std::string role, std::string name, const std::filesystem::path& path);

  std::vector<Part> parts_;
  std::string quant_;
};

}  // namespace fak
