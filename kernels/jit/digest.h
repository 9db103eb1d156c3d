// Sha256Digest: SHA-256 for the kernel library's own identities (the tree digest, raw-source
// URIs). OpenSSL is called directly so that kernels/ depends on nothing of ours.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace kiln::kernels {

class Sha256Digest {
 public:
  Sha256Digest();
  ~Sha256Digest();
  Sha256Digest(const Sha256Digest&) = delete;
  Sha256Digest& operator=(const Sha256Digest&) = delete;

  Sha256Digest& Update(std::string_view bytes);
  // A length-prefixed field: a sequence of fields has exactly one encoding, so ("ab", "c")
  // and ("a", "bc") never hash alike.
  Sha256Digest& UpdateField(std::string_view bytes);
  std::string FinalHex();  // lowercase hex; call once

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::kernels
