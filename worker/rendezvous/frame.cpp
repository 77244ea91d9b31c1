#include "worker/rendezvous/frame.h"

#include <cstring>

namespace tessera::rendezvous {
namespace {

void PutU32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void PutI64(std::vector<uint8_t>& out, int64_t v) {
  const auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<uint8_t>(u >> (8 * i)));
}

void PutBytes(std::vector<uint8_t>& out, const std::string& s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out.insert(out.end(), s.begin(), s.end());
}

// Reserves the header, lets `body` append, then fills the length in.
template <typename Fn>
void WithFrame(std::vector<uint8_t>& out, Fn body) {
  const size_t start = out.size();
  PutU32(out, 0);
  body();
  const auto len = static_cast<uint32_t>(out.size() - start - kFrameHeaderBytes);
  for (int i = 0; i < 4; ++i)
    out[start + i] = static_cast<uint8_t>(len >> (8 * i));
}

// Bounds-checked reader over one frame body. Every read fails (returns false) instead of
// reading past the end.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  bool U8(uint8_t& v) {
    if (left() < 1)
      return false;
    v = in_[pos_++];
    return true;
  }
  bool U32(uint32_t& v) {
    if (left() < 4)
      return false;
    v = 0;
    for (int i = 0; i < 4; ++i)
      v |= static_cast<uint32_t>(in_[pos_ + i]) << (8 * i);
    pos_ += 4;
    return true;
  }
  bool I64(int64_t& v) {
    if (left() < 8)
      return false;
    uint64_t u = 0;
    for (int i = 0; i < 8; ++i)
      u |= static_cast<uint64_t>(in_[pos_ + i]) << (8 * i);
    pos_ += 8;
    v = static_cast<int64_t>(u);
    return true;
  }
  bool Bytes(std::string& s) {
    uint32_t n = 0;
    if (!U32(n) || left() < n)
      return false;
    s.assign(reinterpret_cast<const char*>(in_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  bool Keys(std::vector<std::string>& keys, std::string& error) {
    uint32_t n = 0;
    if (!U32(n))
      return Fail(error, "truncated key count");
    if (n > kMaxKeysPerFrame)
      return Fail(error, "too many keys");
    if (static_cast<size_t>(n) * 4 > left())
      return Fail(error, "key count exceeds the frame");
    keys.resize(n);
    for (auto& k : keys) {
      if (!Bytes(k))
        return Fail(error, "truncated key");
    }
    return true;
  }
  size_t left() const { return in_.size() - pos_; }
  static bool Fail(std::string& error, const char* why) {
    error = why;
    return false;
  }

 private:
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

DecodeResult Malformed(std::string why) {
  return {DecodeStatus::kMalformed, 0, std::move(why)};
}

// Which fields each request type needs; a frame that does not fit is malformed.
std::string ValidateRequest(const Request& r) {
  const size_t n = r.keys.size();
  const bool one_key = n == 1;
  if (r.expected && r.type != RequestType::kCompareSet)
    return "expected value on a non-CAS request";
  switch (r.type) {
    case RequestType::kAuth:
    case RequestType::kList:
    case RequestType::kClearWills:
      return n == 0 ? "" : "request takes no keys";
    case RequestType::kSet:
    case RequestType::kGet:
    case RequestType::kAdd:
    case RequestType::kCompareSet:
    case RequestType::kDelete:
    case RequestType::kAddWill:
      return one_key ? "" : "request takes exactly one key";
    case RequestType::kWait:
      if (n == 0)
        return "wait needs at least one key";
      return r.number >= 0 ? "" : "negative wait timeout";
  }
  return "unknown request type";
}

template <typename Msg, typename BodyFn>
DecodeResult DecodeFramed(std::span<const uint8_t> in, Msg& out, BodyFn body_fn) {
  if (in.size() < kFrameHeaderBytes)
    return {};
  const auto len = DecodeHeader(in.first<kFrameHeaderBytes>());
  if (!len)
    return Malformed("frame body larger than the limit");
  if (in.size() - kFrameHeaderBytes < *len)
    return {};
  DecodeResult r = body_fn(in.subspan(kFrameHeaderBytes, *len), out);
  if (r.status == DecodeStatus::kOk)
    r.consumed = kFrameHeaderBytes + *len;
  return r;
}

}  // namespace

void EncodeRequest(const Request& r, std::vector<uint8_t>& out) {
  WithFrame(out, [&] {
    out.push_back(static_cast<uint8_t>(r.type));
    PutU32(out, static_cast<uint32_t>(r.keys.size()));
    for (const auto& k : r.keys)
      PutBytes(out, k);
    PutBytes(out, r.value);
    out.push_back(r.expected ? 1 : 0);
    if (r.expected)
      PutBytes(out, *r.expected);
    PutI64(out, r.number);
  });
}

void EncodeResponse(const Response& r, std::vector<uint8_t>& out) {
  WithFrame(out, [&] {
    out.push_back(static_cast<uint8_t>(r.status));
    PutBytes(out, r.value);
    PutI64(out, r.number);
    PutU32(out, static_cast<uint32_t>(r.keys.size()));
    for (const auto& k : r.keys)
      PutBytes(out, k);
    PutBytes(out, r.message);
  });
}

std::optional<uint32_t> DecodeHeader(std::span<const uint8_t, kFrameHeaderBytes> h) {
  uint32_t len = 0;
  for (int i = 0; i < 4; ++i)
    len |= static_cast<uint32_t>(h[i]) << (8 * i);
  if (len > kMaxFrameBody)
    return std::nullopt;
  return len;
}

DecodeResult DecodeRequestBody(std::span<const uint8_t> body, Request& out) {
  Reader rd(body);
  std::string error;
  uint8_t type = 0;
  if (!rd.U8(type))
    return Malformed("empty request body");
  if (type < static_cast<uint8_t>(RequestType::kAuth) ||
      type > static_cast<uint8_t>(RequestType::kClearWills)) {
    return Malformed("unknown request type " + std::to_string(type));
  }
  Request r;
  r.type = static_cast<RequestType>(type);
  if (!rd.Keys(r.keys, error))
    return Malformed(error);
  if (!rd.Bytes(r.value))
    return Malformed("truncated value");
  uint8_t has_expected = 0;
  if (!rd.U8(has_expected) || has_expected > 1)
    return Malformed("bad expected-value flag");
  if (has_expected) {
    r.expected.emplace();
    if (!rd.Bytes(*r.expected))
      return Malformed("truncated expected value");
  }
  if (!rd.I64(r.number))
    return Malformed("truncated number");
  if (rd.left() != 0)
    return Malformed("trailing bytes after request");
  if (std::string why = ValidateRequest(r); !why.empty())
    return Malformed(why);
  out = std::move(r);
  return {DecodeStatus::kOk, body.size(), ""};
}

DecodeResult DecodeResponseBody(std::span<const uint8_t> body, Response& out) {
  Reader rd(body);
  std::string error;
  uint8_t status = 0;
  if (!rd.U8(status))
    return Malformed("empty response body");
  if (status > static_cast<uint8_t>(Status::kMismatch)) {
    return Malformed("unknown response status " + std::to_string(status));
  }
  Response r;
  r.status = static_cast<Status>(status);
  if (!rd.Bytes(r.value))
    return Malformed("truncated value");
  if (!rd.I64(r.number))
    return Malformed("truncated number");
  if (!rd.Keys(r.keys, error))
    return Malformed(error);
  if (!rd.Bytes(r.message))
    return Malformed("truncated message");
  if (rd.left() != 0)
    return Malformed("trailing bytes after response");
  out = std::move(r);
  return {DecodeStatus::kOk, body.size(), ""};
}

DecodeResult DecodeRequest(std::span<const uint8_t> in, Request& out) {
  return DecodeFramed(in, out, DecodeRequestBody);
}

DecodeResult DecodeResponse(std::span<const uint8_t> in, Response& out) {
  return DecodeFramed(in, out, DecodeResponseBody);
}

const char* ToString(RequestType type) {
  switch (type) {
    case RequestType::kAuth:
      return "auth";
    case RequestType::kSet:
      return "set";
    case RequestType::kGet:
      return "get";
    case RequestType::kWait:
      return "wait";
    case RequestType::kAdd:
      return "add";
    case RequestType::kCompareSet:
      return "compare_set";
    case RequestType::kDelete:
      return "delete";
    case RequestType::kList:
      return "list";
    case RequestType::kAddWill:
      return "add_will";
    case RequestType::kClearWills:
      return "clear_wills";
  }
  return "unknown";
}

const char* ToString(Status status) {
  switch (status) {
    case Status::kOk:
      return "ok";
    case Status::kNotFound:
      return "not found";
    case Status::kTimeout:
      return "timeout";
    case Status::kAuthFailed:
      return "authentication failed";
    case Status::kBadRequest:
      return "bad request";
    case Status::kMismatch:
      return "mismatch";
  }
  return "unknown";
}

}  // namespace tessera::rendezvous
