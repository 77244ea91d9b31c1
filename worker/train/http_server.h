// The worker's HTTP endpoint (/metrics, /progress): a deliberately small HTTP/1.1 server, GET
// and HEAD only, one request per connection (answered with Connection: close), bodies computed
// when asked. One thread with a normal stack does all the work. That is the point of writing
// it here: civetweb (as Debian builds it) gives its threads small fixed stacks, from which
// glibc also carves every thread's static thread-local storage, and the worker's libraries
// reserve 77 KiB of it (OpenBLAS 60, NCCL 12, the CUDA runtime 4); its threads crashed or
// could not be created. Scrapes are rare and small: requests are served one at a time, each
// allowed 2 s to arrive whole and 2 s for its answer to be taken, so a slow or stalled client
// delays other scrapes by at most that, and the destructor not at all (it wakes the thread).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "worker/train/status.h"

namespace tessera::train {

class HttpServer {
 public:
  struct Route {
    std::string path;  // exact match, the query string ignored
    std::string content_type;
    std::function<std::string()> body;  // called on the server's thread
  };

  // Listens on `port` on all IPv4 interfaces (0: a free port, see port()). kIoError naming
  // the port and the system's reason when it cannot.
  static Status Start(int port, std::vector<Route> routes, std::unique_ptr<HttpServer>* out);
  ~HttpServer();  // stops listening and joins the thread
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }

 private:
  HttpServer() = default;
  void Serve();
  void Answer(int connection);

  std::vector<Route> routes_;
  int listen_fd_ = -1;
  int wake_read_ = -1, wake_write_ = -1;  // a pipe: written once to stop the thread
  int port_ = 0;
  std::thread thread_;
};

}  // namespace tessera::train
