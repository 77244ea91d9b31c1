#include "worker/train/tokenizer.h"

#include <cassert>

namespace tessera::train {

std::vector<int32_t> ByteTokenizer::Encode(std::string_view text) {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    ids[i] = static_cast<unsigned char>(text[i]);
  }
  return ids;
}

std::string ByteTokenizer::Decode(std::span<const int32_t> ids) {
  std::string text(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    assert(ids[i] >= 0 && ids[i] < kVocabSize);
    text[i] = static_cast<char>(static_cast<unsigned char>(ids[i]));
  }
  return text;
}

}  // namespace tessera::train
