// The frame of the files fak writes for itself (session files, prefix cache files):
//
//   magic (8 bytes) | u32 version | u32 header_len | header (JSON) | body | u64 FNV-1a of all
//   that precedes it
//
// one reader for the frame, so every such file is refused the same way: not this kind of file,
// another version, truncated, or corrupted (checksum mismatch).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace fak {

struct CheckedFileView {
  std::string_view header;
  std::string_view body;  // between the header and the checksum
};

// Throws fak::Error "<label> is not a fak <kind> file", "... has format version V; this fak reads
// version W", "... is truncated" or "... is corrupted or truncated (checksum mismatch)".
CheckedFileView open_checked_file(std::string_view bytes, const char (&magic)[8], uint32_t version,
                                  const std::string& label, const char* kind);

}  // namespace fak
