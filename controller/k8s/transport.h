// The transport seam: the only way the Kubernetes client talks HTTP. Implementations:
// transport_cpprest.cpp (real TLS to an API server) and test doubles. It knows nothing of
// Kubernetes: no auth headers, no JSON, no retries; the REST client adds those.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "controller/k8s/cancellation.h"
#include "controller/k8s/result.h"

namespace tessera::k8s {

struct HttpRequest {
  std::string method = "GET";  // GET, POST, PUT, PATCH, DELETE
  std::string path;            // absolute path plus query: "/api/v1/pods?limit=5"
  std::map<std::string, std::string> headers;
  std::string body;
  // The whole exchange (for Stream: the longest silence between two chunks) may take this long.
  std::chrono::milliseconds timeout{30000};
  // Send only (Stream takes its cancellation as an argument). When set, cancelling it ends the
  // exchange promptly with reason "Cancelled"; a request already sent may still take effect on
  // the server. It must outlive the call.
  Cancellation* cancel = nullptr;
  // Send only. When set, the exchange also ends at this time, with reason "Timeout": it bounds
  // several requests together (leader election's renew deadline) where `timeout` bounds one.
  std::optional<std::chrono::steady_clock::time_point> deadline;
};

struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
};

// Thread-safe: any number of requests and streams may be in flight at once.
class HttpTransport {
 public:
  virtual ~HttpTransport() = default;

  // Sends one request and reads the whole response. Any HTTP status is a value (the caller
  // interprets 4xx/5xx); an ApiError with code 0 means no response: connection or TLS
  // failure ("Transport"), `timeout` or `deadline` passed ("Timeout"), `cancel` cancelled
  // ("Cancelled"). A test double may ignore `cancel` and `deadline` (the REST client checks
  // both before it sends).
  virtual Result<HttpResponse> Send(const HttpRequest& request) = 0;

  // Sends a request whose response body is a stream of newline-delimited records (a watch).
  // When the status is 2xx, calls `on_line` for each complete line (without the newline) on
  // the calling thread until the server ends the body, `on_line` returns false, or `cancel`
  // is cancelled; then returns the response with an empty body. For any other status, reads
  // the whole body into the response and calls `on_line` never. Blocks until done; a
  // cancelled stream returns promptly (error reason "Cancelled" or the response so far).
  virtual Result<HttpResponse> Stream(const HttpRequest& request,
                                      const std::function<bool(std::string_view line)>& on_line,
                                      Cancellation& cancel) = 0;
};

}  // namespace tessera::k8s
