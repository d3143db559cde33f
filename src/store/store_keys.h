// Where `fak serve --store` keeps things in Redis. Every key starts with the namespace of the model
// and its KV layout — fak:<model identity>.<kv type>[.nokraw].b<block size>.<kernels>: — so servers
// of different models, KV types or kernel families (whose KV bits differ) share one Redis without
// ever reading each other's records:
//
//   <ns>b:<sha256>               a KV block (prefix cache record, runtime/prefix_record.h),
//   content-
//                                addressed: SHA-256 of the partition and every token up to the
//                                block's end. A cache: written with a TTL, so Redis's volatile-lru
//                                policy may evict it.
//   <ns>s:<tenant>:<session id>  a /v1/fak/ session (a hash: version, meta, blob). Data: no TTL.
//   <ns>l:<tenant>               the tenant's session ids (a set)
//   <ns>gen                      the dataset's generation: the run_id of the Redis process that
//                                serves it and when it was first seen (store/session_records.h)
//
// <tenant> is server/tenant.cpp's hash of the API key: no key is ever written to the store.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "memory/kv_cache.h"
#include "models/model.h"

namespace fak::store {

// "fak:<identity>.<kv>[.nokraw].b<bs>.<kernels>:"
std::string store_namespace(const Model& model, const KvCache& cache);

// The keys of the first n whole blocks of tokens in a partition: keys[i] addresses the block that
// ends at (i + 1) * block_size.
std::vector<std::string> block_keys(const std::string& ns, const std::string& partition,
                                    std::span<const int32_t> tokens, int block_size, size_t n);

inline std::string session_key(const std::string& ns, const std::string& tenant,
                               const std::string& id) {
  return ns + "s:" + tenant + ":" + id;
}
inline std::string session_list_key(const std::string& ns, const std::string& tenant) {
  return ns + "l:" + tenant;
}
inline std::string generation_key(const std::string& ns) {
  return ns + "gen";
}

}  // namespace fak::store
