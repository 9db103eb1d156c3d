#include "kernels/jit/digest.h"

#include <openssl/evp.h>

#include <cstdint>
#include <stdexcept>

namespace kiln::kernels {

struct Sha256Digest::Impl {
  EVP_MD_CTX* ctx = nullptr;
};

Sha256Digest::Sha256Digest() : impl_(std::make_unique<Impl>()) {
  impl_->ctx = EVP_MD_CTX_new();
  if (impl_->ctx == nullptr || EVP_DigestInit_ex(impl_->ctx, EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("OpenSSL: cannot initialise SHA-256");
  }
}

Sha256Digest::~Sha256Digest() { EVP_MD_CTX_free(impl_->ctx); }

Sha256Digest& Sha256Digest::Update(std::string_view bytes) {
  EVP_DigestUpdate(impl_->ctx, bytes.data(), bytes.size());
  return *this;
}

Sha256Digest& Sha256Digest::UpdateField(std::string_view bytes) {
  unsigned char length[8];
  uint64_t n = bytes.size();
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(n >> (8 * i));
  EVP_DigestUpdate(impl_->ctx, length, sizeof(length));
  return Update(bytes);
}

std::string Sha256Digest::FinalHex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_DigestFinal_ex(impl_->ctx, digest, &size);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex(2 * size, '0');
  for (unsigned int i = 0; i < size; ++i) {
    hex[2 * i] = kHex[digest[i] >> 4];
    hex[2 * i + 1] = kHex[digest[i] & 15];
  }
  return hex;
}

}  // namespace kiln::kernels
