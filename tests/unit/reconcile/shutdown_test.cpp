// Controller::Stop against an API server that never answers writes (the audit's SIGTERM case):
// the key in hand ends when Stop cancels its requests, no queued key is taken afterwards, and
// Stop returns promptly, not at the requests' timeout.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <set>
#include <string>

#include "api/contract.h"
#include "controller/reconcile/controller.h"
#include "tests/unit/k8s/fake_apiserver.h"

namespace tessera::reconcile {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

// Reads pass to the in-memory server (dropping the existence selector it does not know);
// writes hang until the request is cancelled, or fail after `hang` without a cancellation.
// Records which job each write was for.
class BlackHoleWrites : public k8s::HttpTransport {
 public:
  explicit BlackHoleWrites(k8s::testing::FakeApiServer& server) : server_(server) {}

  k8s::Result<k8s::HttpResponse> Send(const k8s::HttpRequest& request) override {
    if (request.method == "GET")
      return server_.Send(Strip(request));
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_written_.insert(JobOf(request));
    }
    // As the real transport: the request's cancellation ends it; else its timeout (shortened).
    const k8s::Cancellation& cancel = request.cancel != nullptr ? *request.cancel : never_;
    if (cancel.WaitFor(kHang))
      return k8s::ApiError{0, "Cancelled", "request cancelled"};
    return k8s::ApiError{0, "Timeout", "no answer"};
  }
  k8s::Result<k8s::HttpResponse> Stream(const k8s::HttpRequest& request,
                                        const std::function<bool(std::string_view)>& on_line,
                                        k8s::Cancellation& cancel) override {
    return server_.Stream(Strip(request), on_line, cancel);
  }
  std::set<std::string> JobsWritten() {
    std::lock_guard<std::mutex> lock(mu_);
    return jobs_written_;
  }

 private:
  static constexpr auto kHang = 5s;
  static k8s::HttpRequest Strip(k8s::HttpRequest r) {
    const std::string term = "labelSelector=tessera.dev%2Fjob-name";
    if (auto pos = r.path.find(term);
        pos != std::string::npos &&
        (pos + term.size() == r.path.size() || r.path[pos + term.size()] == '&'))
      r.path.erase(pos, term.size() + (pos + term.size() < r.path.size() ? 1 : 0));
    return r;
  }
  // The job a write is for: its object's job label, or the TrainingJob named in the path.
  static std::string JobOf(const k8s::HttpRequest& r) {
    const Json body = Json::parse(r.body, nullptr, /*allow_exceptions=*/false);
    if (body.is_object() && body.contains("metadata") && body["metadata"].contains("labels") &&
        body["metadata"]["labels"].contains(api::kLabelJobName))
      return body["metadata"]["labels"][api::kLabelJobName];
    const std::string marker = "/trainingjobs/";
    const auto at = r.path.find(marker);
    if (at == std::string::npos)
      return "other: " + r.method + " " + r.path;
    const auto start = at + marker.size();
    return r.path.substr(start, r.path.find('/', start) - start);
  }
  k8s::testing::FakeApiServer& server_;
  const k8s::Cancellation never_;
  std::mutex mu_;
  std::set<std::string> jobs_written_;
};

class NoEvents : public EventSink {
 public:
  void Record(const Json&, const std::string&, const std::string&, const std::string&) override {}
};

Json JobObject(const std::string& name) {
  return {{"apiVersion", "tessera.dev/v1alpha1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"name", name}, {"namespace", "ml"}, {"generation", 1}}},
          {"spec",
           {{"workers", 2},
            {"template",
             {{"spec",
               {{"containers", Json::array({{{"name", "worker"},
                                             {"image", "busybox"},
                                             {"command", Json::array({"true"})}}})}}}}}}}};
}

TEST(ControllerShutdownTest, StopCancelsTheKeyInHandAndTakesNoQueuedKey) {
  k8s::testing::FakeApiServer server;
  k8s::RestOptions rest;
  rest.qps = 0;
  k8s::RestClient setup(server, k8s::ClientConfig{}, rest);
  for (const char* name : {"job1", "job2", "job3", "job4"})
    ASSERT_TRUE(setup.Create(TrainingJobs("ml"), JobObject(name)).ok());

  BlackHoleWrites transport(server);
  k8s::Cancellation cancel_requests;
  rest.cancel = &cancel_requests;
  k8s::RestClient client(transport, k8s::ClientConfig{}, rest);
  NoEvents events;
  ControllerOptions options;
  options.workers = 1;
  options.cancel_requests = &cancel_requests;
  Controller controller(client, events, nullptr, nullptr, options);
  controller.StartInformers();
  ASSERT_TRUE(controller.WaitForSync(10s));
  controller.RunWorkers();
  // The one worker is stuck in its first job's writes, the other three jobs queued.
  const auto limit = std::chrono::steady_clock::now() + 10s;
  while (transport.JobsWritten().empty() && std::chrono::steady_clock::now() < limit)
    std::this_thread::yield();
  ASSERT_EQ(transport.JobsWritten().size(), 1u);

  const auto stopping = std::chrono::steady_clock::now();
  controller.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - stopping, 2s) << "Stop waited for a hung write";
  EXPECT_EQ(transport.JobsWritten().size(), 1u) << "a queued job was reconciled after Stop";
  EXPECT_EQ(controller.QueueLength(), 0u);
}

}  // namespace
}  // namespace tessera::reconcile
