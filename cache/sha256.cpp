// SHA-256 through OpenSSL 3's EVP interface, rendered as lowercase hex.
#include "cache/sha256.h"

#include <openssl/evp.h>

#include <stdexcept>

namespace kiln::cache {
namespace {

std::string ToHex(const unsigned char* digest, unsigned int size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex(size * 2, '0');
  for (unsigned int i = 0; i < size; ++i) {
    hex[2 * i] = kDigits[digest[i] >> 4];
    hex[2 * i + 1] = kDigits[digest[i] & 0xF];
  }
  return hex;
}

}  // namespace

// NOTES: OpenSSL only fails here on allocation failure or a broken provider setup; neither
// is something a caller can handle, so it is reported as an exception rather than a Status.
struct Sha256::Impl {
  EVP_MD_CTX* ctx = nullptr;
  bool finished = false;
};

Sha256::Sha256() : impl_(std::make_unique<Impl>()) {
  impl_->ctx = EVP_MD_CTX_new();
  if (impl_->ctx == nullptr || EVP_DigestInit_ex(impl_->ctx, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("OpenSSL: cannot initialise SHA-256");
}

Sha256::~Sha256() {
  if (impl_ && impl_->ctx != nullptr) EVP_MD_CTX_free(impl_->ctx);
}

void Sha256::Update(std::string_view bytes) {
  if (impl_->finished) throw std::logic_error("Sha256::Update after FinalHex");
  if (!bytes.empty() && EVP_DigestUpdate(impl_->ctx, bytes.data(), bytes.size()) != 1)
    throw std::runtime_error("OpenSSL: SHA-256 update failed");
}

std::string Sha256::FinalHex() {
  if (impl_->finished) throw std::logic_error("Sha256::FinalHex called twice");
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_DigestFinal_ex(impl_->ctx, digest, &size) != 1)
    throw std::runtime_error("OpenSSL: SHA-256 final failed");
  impl_->finished = true;
  return ToHex(digest, size);
}

std::string Sha256Hex(std::string_view bytes) {
  Sha256 hasher;
  hasher.Update(bytes);
  return hasher.FinalHex();
}

bool IsSha256Hex(std::string_view text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace kiln::cache
