// Folders fak keeps its tenants' data in (--cache-dir, --session-dir): a folder another user made
// or can write is refused, because a file planted there would be served to this server's tenants
// (a prefix cache file with altered KV rows) and what this server writes there (its tenants'
// prompts) would be readable by that user. Checked when the folder is made or opened, not only
// when fak made it.
#pragma once

#include <filesystem>
#include <string>

namespace fak {

// Makes `dir` (mode 0700) if it is missing, then refuses it unless it is a real directory (not a
// link), owned by the effective user and not writable by group or others. `what` names it in
// the one-line fak::Error (e.g. "--cache-dir /srv/cache").
void ensure_private_dir(const std::filesystem::path& dir, const std::string& what);

// The same checks on a folder that exists (no creation); throws as ensure_private_dir.
void check_private_dir(const std::filesystem::path& dir, const std::string& what);

// A secret of this folder: 32 random bytes in dir/key (0600, the effective user's), made on first
// use. Files fak writes into the folder carry a MAC under it (io/keyed_digest.h), so a file made
// anywhere else, even with a valid checksum, does not pass as this folder's own.
std::string folder_key(const std::filesystem::path& dir);

}  // namespace fak
