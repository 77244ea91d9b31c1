#include "worker/train/tokenizer.h"

#include <gtest/gtest.h>

namespace tessera::train {
namespace {

TEST(ByteTokenizer, EveryByteIsItsOwnId) {
  const std::string text = std::string("Hi\n") + '\0' + "\xc3\xa9\xff";  // NUL, UTF-8 é, 0xff
  const std::vector<int32_t> ids = ByteTokenizer::Encode(text);
  EXPECT_EQ(ids, (std::vector<int32_t>{'H', 'i', '\n', 0, 0xc3, 0xa9, 0xff}));
}

TEST(ByteTokenizer, DecodeInvertsEncodeForAllByteValues) {
  std::string all;
  for (int b = 0; b < 256; ++b)
    all.push_back(static_cast<char>(b));
  const std::vector<int32_t> ids = ByteTokenizer::Encode(all);
  for (int b = 0; b < 256; ++b)
    EXPECT_EQ(ids[b], b);
  EXPECT_EQ(ByteTokenizer::Decode(ids), all);
}

}  // namespace
}  // namespace tessera::train
