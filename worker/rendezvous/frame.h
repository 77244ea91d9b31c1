// Wire format of the rendezvous store: length-prefixed binary frames, encoded and decoded by
// pure functions (no I/O) so the decoder can be fuzzed on its own.
// Does not know about sockets, threads or the key-value semantics (see store_server.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tessera::rendezvous {

// Frame = u32 little-endian body length, then the body. Bodies larger than this are refused
// before any allocation.
inline constexpr uint32_t kMaxFrameBody = 64u * 1024 * 1024 + 4096;
inline constexpr uint32_t kMaxKeysPerFrame = 65536;
// A kWait's timeout is capped at a week, so no deadline arithmetic overflows.
inline constexpr int64_t kLongestWaitMs = int64_t{7} * 24 * 3600 * 1000;
inline constexpr size_t kFrameHeaderBytes = 4;

enum class RequestType : uint8_t {
  kAuth = 1,         // value = token. Must be the first frame of a connection.
  kSet = 2,          // keys[0] = key, value
  kGet = 3,          // keys[0] = key; replies kNotFound when absent (does not block)
  kWait = 4,         // keys = all keys to wait for, number = timeout in milliseconds; replies their
                     // values in `keys` (kOk) or the missing keys (kTimeout)
  kAdd = 5,          // keys[0] = counter key, number = delta; replies the new value
  kCompareSet = 6,   // keys[0], expected (absent = "key must not exist"), value = desired
  kDelete = 7,       // keys[0]; replies number = 1 when the key existed
  kList = 8,         // value = prefix; replies the matching keys, sorted
  kAddWill = 9,      // keys[0], value: set by the server when this connection drops uncleanly
  kClearWills = 10,  // forget this connection's wills (a clean goodbye)
};

enum class Status : uint8_t {
  kOk = 0,
  kNotFound = 1,
  kTimeout = 2,
  kAuthFailed = 3,
  kBadRequest = 4,
  kMismatch = 5,  // compare-and-set saw another value; value carries the current one
};

// Every request carries all fields; which ones matter depends on the type (see above).
struct Request {
  RequestType type = RequestType::kGet;
  std::vector<std::string> keys;
  std::string value;
  std::optional<std::string> expected;
  int64_t number = 0;
  bool operator==(const Request&) const = default;
};

struct Response {
  Status status = Status::kOk;
  std::string value;
  int64_t number = 0;
  std::vector<std::string> keys;
  std::string message;  // human-readable detail for errors
  bool operator==(const Response&) const = default;
};

enum class DecodeStatus { kOk, kIncomplete, kMalformed };

struct DecodeResult {
  DecodeStatus status = DecodeStatus::kIncomplete;
  size_t consumed = 0;  // bytes of input used by the frame (kOk only)
  std::string error;    // why a frame is malformed
};

// Appends one encoded frame to `out`.
void EncodeRequest(const Request& request, std::vector<uint8_t>& out);
void EncodeResponse(const Response& response, std::vector<uint8_t>& out);

// Decodes the first frame of `in` (header included). kIncomplete: more bytes are needed;
// kMalformed: the input can never become a valid frame (bad length, unknown type, trailing
// bytes, a field that runs past the body, a request whose fields do not fit its type).
// Never reads outside `in`, never allocates more than the frame's declared size.
DecodeResult DecodeRequest(std::span<const uint8_t> in, Request& out);
DecodeResult DecodeResponse(std::span<const uint8_t> in, Response& out);

// Decodes the 4-byte header: the body length, or nullopt when it exceeds kMaxFrameBody.
std::optional<uint32_t> DecodeHeader(std::span<const uint8_t, kFrameHeaderBytes> header);

// Request/response bodies without the header (the server reads the header first).
DecodeResult DecodeRequestBody(std::span<const uint8_t> body, Request& out);
DecodeResult DecodeResponseBody(std::span<const uint8_t> body, Response& out);

const char* ToString(RequestType type);
const char* ToString(Status status);

}  // namespace tessera::rendezvous
