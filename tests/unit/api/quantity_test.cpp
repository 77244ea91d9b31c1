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

// Every suffix the apiserver knows, with its factor.
TEST(Quantity, EverySuffixHasItsFactor) {
  struct {
    const char* text;
    double want;
  } cases[] = {
      {"3Ki", 3 * 0x1p10}, {"3Mi", 3 * 0x1p20}, {"3Gi", 3 * 0x1p30}, {"3Ti", 3 * 0x1p40},
      {"3Pi", 3 * 0x1p50}, {"3Ei", 3 * 0x1p60}, {"3n", 3e-9},        {"3u", 3e-6},
      {"3m", 3e-3},        {"3k", 3e3},         {"3M", 3e6},         {"3G", 3e9},
      {"3T", 3e12},        {"3P", 3e15},        {"3E", 3e18},        {"3", 3},
  };
  for (const auto& c : cases) {
    const std::optional<double> got = ParseQuantity(c.text);
    ASSERT_TRUE(got.has_value()) << c.text;
    EXPECT_DOUBLE_EQ(*got, c.want) << c.text;
  }
}

TEST(Quantity, SignsAndExponents) {
  EXPECT_EQ(ParseQuantity("-1"), -1.0);
  EXPECT_EQ(ParseQuantity("-2Ki"), -2048.0);
  EXPECT_EQ(ParseQuantity("2e+3"), 2e3);
}

TEST(Quantity, AnythingElseIsNotAQuantity) {
  for (const char* bad : {"",      "Gi",   "16GB",     "16 Gi", "1.2.3", "ten",  "1e",  "1ex",
                          "1Mii",  "0x10", "1e999999", "+",     "-",     ".",    "+Ki", "-.",
                          "1e1.5", "1e+",  "1e-",      "1E2.0", "1e3Ki", "1Ki2", "--1", "+-1"}) {
    EXPECT_EQ(ParseQuantity(bad), std::nullopt) << bad;
  }
}

}  // namespace
}  // namespace tessera::api
