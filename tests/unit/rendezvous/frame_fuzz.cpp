// libFuzzer target for the store's frame decoder: arbitrary bytes must never crash it, and
// whatever it accepts must survive an encode/decode round trip unchanged.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "worker/rendezvous/frame.h"

using namespace tessera::rendezvous;

template <typename Msg, typename Decode, typename Encode>
static void RoundTrip(std::span<const uint8_t> in, Decode decode, Encode encode) {
  Msg msg;
  const DecodeResult r = decode(in, msg);
  if (r.status != DecodeStatus::kOk)
    return;
  if (r.consumed > in.size())
    std::abort();
  std::vector<uint8_t> again;
  encode(msg, again);
  Msg second;
  const DecodeResult r2 = decode(again, second);
  if (r2.status != DecodeStatus::kOk || r2.consumed != again.size() || !(second == msg)) {
    std::abort();
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> in(data, size);
  RoundTrip<Request>(in, DecodeRequest, EncodeRequest);
  RoundTrip<Response>(in, DecodeResponse, EncodeResponse);
  return 0;
}
