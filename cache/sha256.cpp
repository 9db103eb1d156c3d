// SHA-256 through OpenSSL 3's EVP interface, rendered as lowercase hex.
#include "cache/sha256.h"

#include <openssl/evp.h>

#include <stdexcept>

namespace kiln::cache {

std::string LowerHex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex(bytes.size() * 2, '0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    const auto byte = static_cast<unsigned char>(bytes[i]);
    hex[2 * i] = kDigits[byte >> 4];
    hex[2 * i + 1] = kDigits[byte & 0xF];
  }
  return hex;
}

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
  if (EVP_DigestFinal_ex(impl_->ctx, digest, &size) != 1) throw std::runtime_error("OpenSSL: SHA-256 final failed");
  impl_->finished = true;
  return LowerHex(std::string_view(reinterpret_cast<const char*>(digest), size));
}

std::string Sha256Hex(std::string_view bytes) {
  Sha256 hasher;
  hasher.Update(bytes);
  return hasher.FinalHex();
}

bool IsLowerHex(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool IsSha256Hex(std::string_view text) { return text.size() == 64 && IsLowerHex(text); }

}  // namespace kiln::cache
