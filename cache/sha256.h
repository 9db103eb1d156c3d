// SHA-256 (OpenSSL 3 EVP) as lowercase hex: cache keys, blob names, checksums.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace kiln::cache {

std::string Sha256Hex(std::string_view bytes);

// Incremental form, for canonical encodings and large files.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(std::string_view bytes);
  std::string FinalHex();  // once

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The one hex spelling of cache/: two lowercase digits per byte ("\x0f\xa0" → "0fa0").
std::string LowerHex(std::string_view bytes);
bool IsLowerHex(std::string_view text);   // non-empty, only 0-9 and a-f (a key or a prefix of one)
bool IsSha256Hex(std::string_view text);  // 64 lowercase hex digits

}  // namespace kiln::cache
