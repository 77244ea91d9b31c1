#include "worker/train/digest.h"

#include <openssl/evp.h>

#include <cassert>

namespace tessera::train {
namespace {

std::string Hex(const unsigned char* digest, unsigned int len) {
  static const char kDigits[] = "0123456789abcdef";
  std::string hex(2 * len, '0');
  for (unsigned int i = 0; i < len; ++i) {
    hex[2 * i] = kDigits[digest[i] >> 4];
    hex[2 * i + 1] = kDigits[digest[i] & 0xf];
  }
  return hex;
}

}  // namespace

std::string Sha256Hex(std::span<const std::byte> bytes) {
  Sha256 sha;
  sha.Update(bytes);
  return sha.FinishHex();
}

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  assert(ctx_ != nullptr);
  EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr);
}

Sha256::~Sha256() {
  EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_));
}

void Sha256::Update(std::span<const std::byte> bytes) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), bytes.data(), bytes.size());
}

std::string Sha256::FinishHex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), digest, &len);
  return Hex(digest, len);
}

}  // namespace tessera::train
