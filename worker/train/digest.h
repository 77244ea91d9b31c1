// SHA-256 digests (OpenSSL) for checkpoint checksums and the config hash. Not a general
// crypto API: hex text out, nothing else.
#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace tessera::train {

// Lower-case hex SHA-256 of `bytes`. Thread-safe.
std::string Sha256Hex(std::span<const std::byte> bytes);

// Incremental SHA-256 for data written in pieces. Not thread-safe.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(std::span<const std::byte> bytes);
  // Lower-case hex digest of everything passed to Update; call once.
  std::string FinishHex();

 private:
  void* ctx_;  // EVP_MD_CTX*
};

}  // namespace tessera::train
