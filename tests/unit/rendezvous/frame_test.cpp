// Frame codec: round trips and the decoder's edge cases (truncation, limits, bad fields).
#include "worker/rendezvous/frame.h"

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

namespace tessera::rendezvous {
namespace {

std::vector<uint8_t> Encoded(const Request& r) {
  std::vector<uint8_t> out;
  EncodeRequest(r, out);
  return out;
}

TEST(Frame, RequestsRoundTrip) {
  const std::vector<Request> cases = {
      {RequestType::kAuth, {}, "secret", std::nullopt, 0},
      {RequestType::kSet, {"a/b"}, std::string("v\0w", 3), std::nullopt, 0},
      {RequestType::kGet, {""}, "", std::nullopt, 0},
      {RequestType::kWait, {"x", "y", "z"}, "", std::nullopt, 1500},
      {RequestType::kWait, {"x"}, "", std::nullopt, 0},  // a zero timeout only looks
      {RequestType::kAdd, {"n"}, "", std::nullopt, -7},
      {RequestType::kCompareSet, {"k"}, "new", std::string("old"), 0},
      {RequestType::kCompareSet, {"k"}, "new", std::nullopt, 0},
      {RequestType::kDelete, {"k"}, "", std::nullopt, 0},
      {RequestType::kList, {}, "prefix/", std::nullopt, 0},
      {RequestType::kAddWill, {"lost/3"}, "3", std::nullopt, 0},
      {RequestType::kClearWills, {}, "", std::nullopt, 0},
  };
  for (const auto& req : cases) {
    auto bytes = Encoded(req);
    Request back;
    auto r = DecodeRequest(bytes, back);
    ASSERT_EQ(r.status, DecodeStatus::kOk) << ToString(req.type) << ": " << r.error;
    EXPECT_EQ(r.consumed, bytes.size());
    EXPECT_EQ(back, req) << ToString(req.type);
  }
}

TEST(Frame, ResponseRoundTripAndTwoFramesInOneBuffer) {
  Response a{Status::kTimeout, "", 0, {"missing/1", "missing/2"}, "late"};
  Response b{Status::kOk, "value", 42, {}, ""};
  std::vector<uint8_t> bytes;
  EncodeResponse(a, bytes);
  const size_t first = bytes.size();
  EncodeResponse(b, bytes);
  Response got;
  auto r = DecodeResponse(bytes, got);
  ASSERT_EQ(r.status, DecodeStatus::kOk);
  EXPECT_EQ(r.consumed, first);
  EXPECT_EQ(got, a);
  r = DecodeResponse(std::span<const uint8_t>(bytes).subspan(first), got);
  ASSERT_EQ(r.status, DecodeStatus::kOk);
  EXPECT_EQ(got, b);
}

TEST(Frame, EveryStrictPrefixOfAFrameIsIncomplete) {
  auto bytes = Encoded({RequestType::kWait, {"k1", "k2"}, "", std::nullopt, 10});
  for (size_t n = 0; n < bytes.size(); ++n) {
    Request out;
    EXPECT_EQ(DecodeRequest(std::span<const uint8_t>(bytes.data(), n), out).status,
              DecodeStatus::kIncomplete)
        << "prefix of " << n << " bytes";
  }
}

// A body built by hand: u8 type, u32 nkeys, keys, value, u8 has_expected, [expected], i64.
struct Body {
  std::vector<uint8_t> b;
  Body& u8(uint8_t v) {
    b.push_back(v);
    return *this;
  }
  Body& u32(uint32_t v) {
    for (int i = 0; i < 4; ++i)
      b.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  Body& i64(int64_t v) {
    for (int i = 0; i < 8; ++i)
      b.push_back(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i)));
    return *this;
  }
  Body& str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
};

TEST(Frame, MalformedBodiesAreRefusedWithAReason) {
  struct Case {
    const char* name;
    Body body;
    const char* reason;
  };
  const std::vector<Case> cases = {
      {"empty body", Body{}, "empty"},
      {"unknown type 0", Body{}.u8(0).u32(0).str("").u8(0).i64(0), "unknown request type"},
      {"unknown type 0 alone", Body{}.u8(0), "unknown request type"},
      {"three-byte key count", Body{}.u8(2).u8(1).u8(0).u8(0), "truncated key count"},
      {"auth with a key", Body{}.u8(1).u32(1).str("k").str("t").u8(0).i64(0), "takes no keys"},
      {"list with a key", Body{}.u8(8).u32(1).str("k").str("p/").u8(0).i64(0), "takes no keys"},
      {"clear_wills with a key", Body{}.u8(10).u32(1).str("k").str("").u8(0).i64(0),
       "takes no keys"},
      {"unknown type 99", Body{}.u8(99).u32(0).str("").u8(0).i64(0), "unknown request type"},
      {"set without a key", Body{}.u8(2).u32(0).str("v").u8(0).i64(0), "exactly one key"},
      {"get with two keys", Body{}.u8(3).u32(2).str("a").str("b").str("").u8(0).i64(0),
       "exactly one key"},
      {"wait without keys", Body{}.u8(4).u32(0).str("").u8(0).i64(5), "at least one key"},
      {"negative wait timeout", Body{}.u8(4).u32(1).str("a").str("").u8(0).i64(-1), "negative"},
      {"key count larger than the frame", Body{}.u8(2).u32(1000).str("a"), "exceeds the frame"},
      {"key count over the limit", Body{}.u8(2).u32(kMaxKeysPerFrame + 1), "too many keys"},
      {"key longer than the frame", Body{}.u8(2).u32(1).u32(1000).u8('x'), "truncated key"},
      {"missing number", Body{}.u8(2).u32(1).str("k").str("v").u8(0), "truncated number"},
      {"expected flag 2", Body{}.u8(6).u32(1).str("k").str("v").u8(2).i64(0), "flag"},
      {"expected on a set", Body{}.u8(2).u32(1).str("k").str("v").u8(1).str("e").i64(0), "non-CAS"},
      {"trailing bytes", Body{}.u8(3).u32(1).str("k").str("").u8(0).i64(0).u8(7), "trailing"},
  };
  for (const auto& c : cases) {
    Request out;
    auto r = DecodeRequestBody(c.body.b, out);
    EXPECT_EQ(r.status, DecodeStatus::kMalformed) << c.name;
    EXPECT_NE(r.error.find(c.reason), std::string::npos) << c.name << ": " << r.error;
  }
}

TEST(Frame, HeaderOverTheLimitIsMalformedBeforeTheBodyArrives) {
  const uint32_t len = kMaxFrameBody + 1;
  std::vector<uint8_t> bytes = {static_cast<uint8_t>(len), static_cast<uint8_t>(len >> 8),
                                static_cast<uint8_t>(len >> 16), static_cast<uint8_t>(len >> 24)};
  Request out;
  EXPECT_EQ(DecodeRequest(bytes, out).status, DecodeStatus::kMalformed);
  Response resp;
  EXPECT_EQ(DecodeResponse(bytes, resp).status, DecodeStatus::kMalformed);
}

TEST(Frame, HeaderAtTheLimitWaitsForTheBody) {
  const uint32_t len = kMaxFrameBody;
  const std::array<uint8_t, kFrameHeaderBytes> header = {
      static_cast<uint8_t>(len), static_cast<uint8_t>(len >> 8), static_cast<uint8_t>(len >> 16),
      static_cast<uint8_t>(len >> 24)};
  EXPECT_EQ(DecodeHeader(header), kMaxFrameBody);
  Request out;
  EXPECT_EQ(DecodeRequest(header, out).status, DecodeStatus::kIncomplete);
}

// A wait for the most keys a frame may carry (the empty key, kMaxKeysPerFrame times).
TEST(Frame, AFrameWithTheMostKeysDecodes) {
  Body body;
  body.u8(static_cast<uint8_t>(RequestType::kWait)).u32(kMaxKeysPerFrame);
  for (uint32_t i = 0; i < kMaxKeysPerFrame; ++i)
    body.str("");
  body.str("").u8(0).i64(1);
  Request out;
  auto r = DecodeRequestBody(body.b, out);
  ASSERT_EQ(r.status, DecodeStatus::kOk) << r.error;
  EXPECT_EQ(out.keys.size(), kMaxKeysPerFrame);
}

// A response body built by hand: u8 status, value, i64 number, u32 nkeys, keys, message.
TEST(Frame, MalformedResponseBodiesAreRefusedWithAReason) {
  struct Case {
    const char* name;
    Body body;
    const char* reason;
  };
  const std::vector<Case> cases = {
      {"empty body", Body{}, "empty"},
      {"unknown status 9", Body{}.u8(9).str("").i64(0).u32(0).str(""), "unknown response status"},
      {"missing number", Body{}.u8(0).str("v"), "truncated number"},
      {"missing message", Body{}.u8(0).str("v").i64(1).u32(0), "truncated message"},
      {"message longer than the frame", Body{}.u8(0).str("v").i64(1).u32(0).u32(9).u8('m'),
       "truncated message"},
      {"trailing bytes", Body{}.u8(0).str("v").i64(1).u32(0).str("").u8(7), "trailing"},
  };
  for (const auto& c : cases) {
    Response out;
    auto r = DecodeResponseBody(c.body.b, out);
    EXPECT_EQ(r.status, DecodeStatus::kMalformed) << c.name;
    EXPECT_NE(r.error.find(c.reason), std::string::npos) << c.name << ": " << r.error;
  }
}

}  // namespace
}  // namespace tessera::rendezvous
