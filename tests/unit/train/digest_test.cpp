#include "worker/train/digest.h"

#include <gtest/gtest.h>

#include <span>
#include <string>

namespace tessera::train {
namespace {

std::span<const std::byte> Bytes(const std::string& s) {
  return std::as_bytes(std::span(s));
}

// The standard SHA-256 (FIPS 180-2 test vectors), so `sha256sum` agrees with meta.json, in one
// piece or in several.
TEST(Sha256, MatchesTheStandardTestVectors) {
  struct Case {
    std::string input;
    const char* want;
  } cases[] = {
      {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {std::string(1000000, 'a'),  // many blocks, as a shard file is
       "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Sha256Hex(Bytes(c.input)), c.want) << c.input.size() << " bytes";
    Sha256 pieces;
    const size_t half = c.input.size() / 2;
    pieces.Update(Bytes(c.input.substr(0, half)));
    pieces.Update(Bytes(c.input.substr(half)));
    EXPECT_EQ(pieces.FinishHex(), c.want) << c.input.size() << " bytes";
  }
}

}  // namespace
}  // namespace tessera::train
