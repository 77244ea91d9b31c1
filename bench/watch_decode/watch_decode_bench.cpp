// watch_decode_bench [EVENT_FILE] [ROUNDS] [N]: what the pod informer does with each watch
// event of a worker pod (decode the line, trim the object to what reconcile reads, pack it as
// MessagePack for the cache), timed two ways in the same run: parsing the whole line into a
// tree (the peer), and parsing only the fields TrimPod reads (PodFields, field_filter.h).
// The default event is kwok_pod_event.json next to this file: a running worker pod of a
// bench/scale job as the API server sends it (5.3 KB, managedFields included). Prints the
// microseconds per event of each, round by round, then `ratio=<whole ÷ filtered>` of the
// medians. Checks first that both ways cache the same bytes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "controller/k8s/rest.h"
#include "controller/reconcile/cache_trim.h"

namespace {

using namespace tessera;

// Decodes, trims and packs one event; returns the packed bytes (empty on a decode error).
std::vector<std::uint8_t> Cache(const std::string& line,
                                const std::shared_ptr<const k8s::FieldFilter>& filter) {
  k8s::Result<k8s::WatchEvent> event = k8s::DecodeWatchEvent(line, filter);
  if (!event.ok())
    return {};
  nlohmann::json object = std::move(event->object);
  reconcile::TrimPod(object);
  return nlohmann::json::to_msgpack(object);
}

double MicrosecondsPerEvent(const std::string& line,
                            const std::shared_ptr<const k8s::FieldFilter>& filter, int n) {
  std::size_t bytes = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; i++)
    bytes += Cache(line, filter).size();
  const auto elapsed = std::chrono::steady_clock::now() - start;
  if (bytes == 0)
    std::abort();
  return std::chrono::duration<double, std::micro>(elapsed).count() / n;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : TESSERA_WATCH_DECODE_EVENT;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  const int n = argc > 3 ? std::atoi(argv[3]) : 5000;
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string line = text.str();
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r'))
    line.pop_back();
  const auto filter = reconcile::PodFields();
  const std::vector<std::uint8_t> whole = Cache(line, nullptr);
  if (!in || whole.empty() || rounds < 1 || n < 1) {
    std::fprintf(stderr, "watch_decode_bench: %s: not a watch event line (or bad ROUNDS/N)\n",
                 path.c_str());
    return 2;
  }
  if (Cache(line, filter) != whole) {
    std::fprintf(stderr, "watch_decode_bench: the filtered parse caches different bytes\n");
    return 1;
  }
  std::printf("event %zu bytes, cached %zu bytes packed, %d rounds of %d events\n", line.size(),
              whole.size(), rounds, n);
  std::vector<double> peer, ours;
  for (int r = 0; r < rounds; r++) {
    peer.push_back(MicrosecondsPerEvent(line, nullptr, n));
    ours.push_back(MicrosecondsPerEvent(line, filter, n));
    std::printf("round %d: whole %.1f us, filtered %.1f us\n", r, peer.back(), ours.back());
  }
  std::printf("whole_us=%.1f filtered_us=%.1f\nratio=%.2f\n", Median(peer), Median(ours),
              Median(peer) / Median(ours));
  return 0;
}
