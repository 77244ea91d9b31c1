// The byte-level tokenizer: every byte of UTF-8 text is one token id in [0, 256). Lossless
// and vocabulary-free; it does not merge bytes (no BPE).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::train {

class ByteTokenizer {
 public:
  static constexpr int kVocabSize = 256;

  // One id per byte, the byte's unsigned value.
  static std::vector<int32_t> Encode(std::string_view text);

  // Inverse of Encode. Ids outside [0, 256) are an invariant violation (asserted).
  static std::string Decode(std::span<const int32_t> ids);
};

}  // namespace tessera::train
