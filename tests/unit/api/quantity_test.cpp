#include "api/quantity.h"

#include <gtest/gtest.h>

namespace tessera::api {
namespace {

TEST(Quantity, SuffixesAndNumbersAsTheApiServerReadsThem) {
  EXPECT_EQ(ParseQuantity("128974848"), 128974848.0);
  EXPECT_EQ(ParseQuantity("129e6"), 129e6);
  EXPECT_EQ(ParseQuantity("129M"), 129e6);
  EXPECT_EQ(ParseQuantity("123Mi"), 123.0 * 1024 * 1024);
  EXPECT_EQ(ParseQuantity("1.5Gi"), 1.5 * 1024 * 1024 * 1024);
  EXPECT_EQ(ParseQuantity("16Gi"), 16.0 * 1024 * 1024 * 1024);
  EXPECT_EQ(ParseQuantity(".5Ki"), 512.0);
  EXPECT_EQ(ParseQuantity("2Ei"), 2.0 * 0x1p60);  // a binary suffix starting with E
  EXPECT_EQ(ParseQuantity("2E"), 2e18);           // exa, not an exponent
  EXPECT_EQ(ParseQuantity("1E3"), 1e3);
  EXPECT_EQ(ParseQuantity("+4k"), 4000.0);
  EXPECT_DOUBLE_EQ(*ParseQuantity("250m"), 0.25);
  EXPECT_DOUBLE_EQ(*ParseQuantity("5e-1"), 0.5);
}

TEST(Quantity, AnythingElseIsNotAQuantity) {
  for (const char* bad :
       {"", "Gi", "16GB", "16 Gi", "1.2.3", "ten", "1e", "1ex", "1Mii", "0x10", "1e999999"}) {
    EXPECT_EQ(ParseQuantity(bad), std::nullopt) << bad;
  }
}

}  // namespace
}  // namespace tessera::api
