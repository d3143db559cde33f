// SHA-256 digests of whole files (multi-GB model weights), computed in parallel and cached on disk
// so that a model is read in full once, not on every start.
//
// A file's digest is SHA-256 over a fixed tag, the file's size (8 bytes, little-endian) and the
// SHA-256 of each 64 MiB chunk in file order. Chunks are hashed on up to hardware_concurrency
// threads; the combination depends only on the bytes, never on the thread count.
//
// The cache: one small text file per (st_dev, st_ino) under the cache folder, answered only when
// the file's size, mtime and ctime (both in ns) are what they were when it was hashed. ctime too,
// because a user (or `touch -d`, or an unpacker restoring times) can set mtime back, and nobody
// can set ctime. note: a file rewritten within one timestamp tick (coarse kernel clocks, 2 s on
// FAT) with the same size would keep both times; so an entry is written only when the file's
// ctime lies over kRacyMarginNs before the hashing began ("racy" files, as git calls them, are
// hashed again on the next start, and cached then). Entries are hints: an unreadable, unwritable
// or corrupt one never fails a digest, it is computed instead.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace fak {

// How long after its last change (ctime) a file is still too young to cache the digest of.
inline constexpr int64_t kRacyMarginNs = 1'000'000'000;

// Chunk size of the parallel hash; part of the digest's definition (changing it changes digests).
inline constexpr size_t kDigestChunkBytes = size_t(64) << 20;

// The cache folder: $FAK_DIGEST_CACHE if set (an empty value turns the cache off), else
// $XDG_CACHE_HOME/fak/digests, else $HOME/.cache/fak/digests; empty when none of them is set.
std::filesystem::path default_digest_cache_dir();

// Lowercase hex SHA-256 of the file (as defined above) behind an open descriptor, read with
// pread (the descriptor's offset is left alone). cache_dir empty: no cache. from_cache (may be
// null) says whether the cache answered. Throws fak::Error naming `name` when the file cannot be
// read.
std::string file_digest_fd(int fd, const std::string& name, const std::filesystem::path& cache_dir,
                           bool* from_cache = nullptr);

// The same for a path (opened, hashed, closed).
std::string file_digest(const std::filesystem::path& path, const std::filesystem::path& cache_dir,
                        bool* from_cache = nullptr);

// Lowercase hex SHA-256 of a byte string (identity manifests).
std::string sha256_hex(const void* data, size_t n);

}  // namespace fak
