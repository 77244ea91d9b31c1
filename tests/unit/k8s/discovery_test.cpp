// Discovery (controller/k8s/discovery.h) against a transport that serves discovery documents
// from a table and counts requests: answers, served or not, are remembered for the TTL; a
// failed lookup is an error and is not remembered; Invalidate forgets.
#include "controller/k8s/discovery.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace tessera::k8s {
namespace {

using namespace std::chrono_literals;

class DiscoveryDocuments : public HttpTransport {
 public:
  // GET `path` answers `status` with `body`; paths not set answer 404 NotFound.
  void Answer(const std::string& path, int status, const Json& body) {
    std::lock_guard<std::mutex> lock(mu_);
    answers_[path] = {status, body.dump()};
  }
  int Requests(const std::string& path) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = requests_.find(path);
    return it == requests_.end() ? 0 : it->second;
  }
  Result<HttpResponse> Send(const HttpRequest& request) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++requests_[request.path];
    auto it = answers_.find(request.path);
    if (it == answers_.end())
      return HttpResponse{404, {}, R"({"kind":"Status","code":404,"reason":"NotFound"})"};
    return HttpResponse{it->second.first, {}, it->second.second};
  }
  Result<HttpResponse> Stream(const HttpRequest&, const std::function<bool(std::string_view)>&,
                              Cancellation&) override {
    return ApiError{0, "Transport", "discovery documents only"};
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::pair<int, std::string>> answers_;
  std::map<std::string, int> requests_;
};

Json ResourceList(std::initializer_list<const char*> names) {
  Json resources = Json::array();
  for (const char* name : names)
    resources.push_back({{"name", name}, {"namespaced", true}});
  return {{"kind", "APIResourceList"}, {"resources", resources}};
}

class K8sDiscoveryTest : public ::testing::Test {
 protected:
  K8sDiscoveryTest() : client_(documents_, ClientConfig{}, Unlimited()) {}
  static RestOptions Unlimited() {
    RestOptions o;
    o.qps = 0;
    return o;
  }
  DiscoveryDocuments documents_;
  RestClient client_;
};

TEST_F(K8sDiscoveryTest, AnswersServedOrNotAreRememberedUntilInvalidated) {
  const std::string volcano = "/apis/scheduling.volcano.sh/v1beta1";
  documents_.Answer(volcano, 200, ResourceList({"podgroups", "podgroups/status", "queues"}));
  documents_.Answer("/api/v1", 200, ResourceList({"pods"}));
  Discovery discovery(client_, {.ttl = 1h});
  struct Case {
    std::string group, version, resource;
    bool served;
  };
  const Case cases[] = {
      {"scheduling.volcano.sh", "v1beta1", "podgroups", true},
      {"scheduling.volcano.sh", "v1beta1", "podgroup", false},  // whole names only
      {"scheduling.volcano.sh", "v1beta1", "jobs", false},
      {"", "v1", "pods", true},                                 // the core group lives under /api
      {"scheduling.x-k8s.io", "v1alpha1", "podgroups", false},  // 404: not served
  };
  for (int round = 0; round < 2; ++round) {
    for (const auto& c : cases) {
      SCOPED_TRACE(c.group + "/" + c.version + " " + c.resource);
      auto served = discovery.Serves(c.group, c.version, c.resource);
      ASSERT_TRUE(served.ok()) << served.error().ToString();
      EXPECT_EQ(*served, c.served);
    }
  }
  EXPECT_EQ(documents_.Requests(volcano), 1);
  EXPECT_EQ(documents_.Requests("/api/v1"), 1);
  EXPECT_EQ(documents_.Requests("/apis/scheduling.x-k8s.io/v1alpha1"), 1) << "404 remembered";

  // Installed meanwhile: noticed once invalidated.
  documents_.Answer("/apis/scheduling.x-k8s.io/v1alpha1", 200, ResourceList({"podgroups"}));
  EXPECT_FALSE(*discovery.Serves("scheduling.x-k8s.io", "v1alpha1", "podgroups"));
  discovery.Invalidate("scheduling.x-k8s.io", "v1alpha1");
  EXPECT_TRUE(*discovery.Serves("scheduling.x-k8s.io", "v1alpha1", "podgroups"));
  EXPECT_EQ(documents_.Requests("/apis/scheduling.x-k8s.io/v1alpha1"), 2);
  EXPECT_EQ(documents_.Requests(volcano), 1) << "other group/versions stay remembered";
}

TEST_F(K8sDiscoveryTest, FailedLookupsAreErrorsAndAreAskedAgain) {
  const std::string path = "/apis/scheduling.x-k8s.io/v1alpha1";
  Discovery discovery(client_, {.ttl = 1h});
  for (int status : {403, 503}) {
    SCOPED_TRACE(status);
    documents_.Answer(path, status, Json::object());
    auto served = discovery.Serves("scheduling.x-k8s.io", "v1alpha1", "podgroups");
    ASSERT_FALSE(served.ok());
    EXPECT_EQ(served.error().code, status);
  }
  documents_.Answer(path, 200, ResourceList({"podgroups"}));
  auto served = discovery.Serves("scheduling.x-k8s.io", "v1alpha1", "podgroups");
  ASSERT_TRUE(served.ok());
  EXPECT_TRUE(*served);
  EXPECT_EQ(documents_.Requests(path), 3);
}

TEST_F(K8sDiscoveryTest, AnswersAreForgottenAfterTheTtl) {
  documents_.Answer("/api/v1", 200, ResourceList({"pods"}));
  Discovery discovery(client_, {.ttl = std::chrono::steady_clock::duration::zero()});
  EXPECT_TRUE(*discovery.Serves("", "v1", "pods"));
  EXPECT_TRUE(*discovery.Serves("", "v1", "pods"));
  EXPECT_EQ(documents_.Requests("/api/v1"), 2);
}

}  // namespace
}  // namespace tessera::k8s
