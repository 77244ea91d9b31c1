// The REST client against the in-memory API server: paths, verbs, content types, errors as
// values, bearer tokens, request counters, the token bucket behind --qps/--burst, and the
// cancellation and deadlines that end calls waiting for it.
#include "controller/k8s/rest.h"

#include <gtest/gtest.h>

#include <future>
#include <thread>
#include <vector>

#include "tests/unit/k8s/fake_apiserver.h"

namespace tessera::k8s {
namespace {

using namespace std::chrono_literals;
using testing::FakeApiServer;

// A transport that answers every request with one canned response and keeps the requests.
// Not thread-safe: one test thread uses it.
class CannedTransport : public HttpTransport {
 public:
  explicit CannedTransport(HttpResponse response) : response_(std::move(response)) {}
  Result<HttpResponse> Send(const HttpRequest& request) override {
    requests.push_back(request);
    return response_;
  }
  Result<HttpResponse> Stream(const HttpRequest& request,
                              const std::function<bool(std::string_view)>& /*on_line*/,
                              Cancellation& /*cancel*/) override {
    requests.push_back(request);
    return response_;
  }
  std::vector<HttpRequest> requests;

 private:
  HttpResponse response_;
};

RestOptions Unlimited() {
  RestOptions options;
  options.qps = 0;
  return options;
}

TEST(K8sResourceRefTest, PathsForCoreGroupedNamespacedAndClusterScoped) {
  struct Case {
    ResourceRef ref;
    std::string subresource;
    std::string path;
  };
  const Case cases[] = {
      {ConfigMaps("ns1").Named("cm"), "", "/api/v1/namespaces/ns1/configmaps/cm"},
      {ConfigMaps(), "", "/api/v1/configmaps"},
      {Nodes().Named("n1"), "status", "/api/v1/nodes/n1/status"},
      {Leases("kube-system").Named("l"), "",
       "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l"},
      {ResourceRef{"tessera.dev", "v1alpha1", "trainingjobs", "a", "j"}, "status",
       "/apis/tessera.dev/v1alpha1/namespaces/a/trainingjobs/j/status"},
      {Events("x"), "", "/apis/events.k8s.io/v1/namespaces/x/events"},
  };
  for (const auto& c : cases)
    EXPECT_EQ(c.ref.Path(c.subresource), c.path);
}

TEST(K8sApiErrorTest, ReadsStatusBodiesAndClassifies) {
  struct Case {
    int code;
    std::string body;
    std::string reason;
    bool not_found, conflict, exists, gone, invalid, retryable;
  };
  const Case cases[] = {
      {404, R"({"kind":"Status","reason":"NotFound","message":"cm \"x\" not found"})", "NotFound",
       true, false, false, false, false, false},
      {409, R"({"kind":"Status","reason":"Conflict","message":"modified"})", "Conflict", false,
       true, false, false, false, false},
      {409, R"({"kind":"Status","reason":"AlreadyExists","message":"exists"})", "AlreadyExists",
       false, false, true, false, false, false},
      {410, R"({"kind":"Status","reason":"Expired","message":"too old"})", "Expired", false, false,
       false, true, false, false},
      {422, R"({"kind":"Status","reason":"Invalid","message":"spec.x"})", "Invalid", false, false,
       false, false, true, false},
      {503, "upstream connect error", "InternalError", false, false, false, false, false, true},
      {429, "", "TooManyRequests", false, false, false, false, false, true},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.body);
    ApiError e = ErrorFromResponse(c.code, c.body);
    EXPECT_EQ(e.code, c.code);
    EXPECT_EQ(e.reason, c.reason);
    EXPECT_EQ(e.IsNotFound(), c.not_found);
    EXPECT_EQ(e.IsConflict(), c.conflict);
    EXPECT_EQ(e.IsAlreadyExists(), c.exists);
    EXPECT_EQ(e.IsGone(), c.gone);
    EXPECT_EQ(e.IsInvalid(), c.invalid);
    EXPECT_EQ(e.IsRetryable(), c.retryable);
  }
}

// A body that is not a Status is quoted on one line: the API server's "404 page not found\n"
// for a group it does not serve (the TrainingJob CRD not installed) cut the controller's log
// line in two.
TEST(K8sApiErrorTest, QuotesANonStatusBodyOnOneLine) {
  EXPECT_EQ(ErrorFromResponse(404, "404 page not found\n").ToString(),
            "404 NotFound: 404 page not found");
  EXPECT_EQ(ErrorFromResponse(502, "<html>\r\n  <b>bad</b>\n\t</html>\n").message,
            "<html> <b>bad</b> </html>");
  EXPECT_EQ(ErrorFromResponse(502, " \n ").message, "");
}

// A body that is not a Status is quoted in events and status messages, which are JSON: cut
// mid-character or not UTF-8 at all, its bad bytes become '?'.
TEST(K8sApiErrorTest, QuotesANonStatusBodyAsUtf8) {
  EXPECT_EQ(ErrorFromResponse(502, "bad \xff gateway").message, "bad ? gateway");
  const std::string dashes(600, '-');
  const std::string cut = ErrorFromResponse(502, dashes.substr(0, 511) + "\xe2\x80\x94").message;
  EXPECT_EQ(cut, dashes.substr(0, 511) + "?");
  // A Status whose fields have other types than strings is still a Status, without them.
  const ApiError e = ErrorFromResponse(409, R"({"kind":"Status","reason":7,"message":["x"]})");
  EXPECT_EQ(e.reason, "Conflict");
  EXPECT_EQ(e.message, "");
}

// The transport follows no redirect: a 3xx says where it pointed and what to change.
TEST(K8sApiErrorTest, RedirectNamesTheLocationAndTheFix) {
  const ApiError e = ErrorFromResponse(301, "<html>Moved</html>", "https://10.0.0.1:6443/api");
  EXPECT_EQ(e.code, 301);
  EXPECT_EQ(e.reason, "Redirect");
  EXPECT_EQ(e.message,
            "the server redirected to https://10.0.0.1:6443/api, which is not followed: set the "
            "kubeconfig's server to the API server's own address");
  EXPECT_NE(ErrorFromResponse(307, "").message.find("(no Location)"), std::string::npos);
  // A Status body still speaks for itself.
  EXPECT_EQ(
      ErrorFromResponse(302, R"({"kind":"Status","reason":"Found","message":"m"})", "x").reason,
      "Found");
}

// A body that is not a Status (a proxy's page, an empty body) is classified by its code alone.
TEST(K8sApiErrorTest, ClassifiesByCodeWhenTheBodyIsNoStatus) {
  struct Case {
    int code;
    std::string reason;
    bool retryable;
  };
  const Case cases[] = {
      {300, "Redirect", false},     {399, "Redirect", false},       {400, "BadRequest", false},
      {401, "Unauthorized", false}, {403, "Forbidden", false},      {404, "NotFound", false},
      {409, "Conflict", false},     {410, "Gone", false},           {418, "Unknown", false},
      {422, "Invalid", false},      {429, "TooManyRequests", true}, {500, "InternalError", true},
      {504, "InternalError", true},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.code);
    const ApiError e = ErrorFromResponse(c.code, "<html>upstream</html>");
    EXPECT_EQ(e.code, c.code);
    EXPECT_EQ(e.reason, c.reason);
    EXPECT_EQ(e.IsRetryable(), c.retryable);
    EXPECT_EQ(e.IsGone(), c.code == 410);
  }
}

// An ERROR event's Status: a code outside 100..599 reads as 500; a missing reason is filled in
// from the code without losing the message; reason Expired alone means Gone.
TEST(K8sWatchEventTest, ErrorStatusesKeepTheirCodeInRangeAndTheirMessage) {
  struct Case {
    const char* object;
    int code;
    std::string reason, message;
    bool gone;
  };
  const Case cases[] = {
      {R"({"code":100,"reason":"R"})", 100, "R", "", false},
      {R"({"code":599,"reason":"R"})", 599, "R", "", false},
      {R"({"code":99,"reason":"R"})", 500, "R", "", false},
      {R"({"code":600,"reason":"R"})", 500, "R", "", false},
      {R"({"code":410,"message":"too old"})", 410, "Gone", "too old", true},
      {R"({"reason":"Expired","message":"too old"})", 500, "Expired", "too old", true},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.object);
    auto e = DecodeWatchEvent(std::string(R"({"type":"ERROR","object":)") + c.object + "}");
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.error().code, c.code);
    EXPECT_EQ(e.error().reason, c.reason);
    EXPECT_EQ(e.error().message, c.message);
    EXPECT_EQ(e.error().IsGone(), c.gone);
  }
}

TEST(K8sWatchEventTest, DecodesEventsAndErrors) {
  auto added = DecodeWatchEvent(R"({"type":"ADDED","object":{"metadata":{"name":"a"}}})");
  ASSERT_TRUE(added.ok());
  EXPECT_EQ(added->type, "ADDED");
  EXPECT_EQ(added->object["metadata"]["name"], "a");

  auto gone = DecodeWatchEvent(
      R"({"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"old"}})");
  ASSERT_FALSE(gone.ok());
  EXPECT_TRUE(gone.error().IsGone());
  EXPECT_EQ(gone.error().message, "old");
  // A code that is no HTTP status reads as 500, classified by it.
  auto odd = DecodeWatchEvent(R"({"type":"ERROR","object":{"code":4.1e20}})");
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.error().code, 500);
  EXPECT_EQ(odd.error().reason, "InternalError");

  // Nlohmann's value() threw on each of these (a type it did not expect): now they are one
  // InvalidResponse error that names the line.
  for (const char* line : {R"({"type":1,"object":{}})", R"({"type":"ADDED","object":[]})",
                           R"({"type":"ADDED"})", "[]", "{", "\xff"}) {
    auto e = DecodeWatchEvent(line);
    ASSERT_FALSE(e.ok()) << line;
    EXPECT_EQ(e.error().reason, "InvalidResponse") << line;
    EXPECT_NE(e.error().message.find("watch event is not JSON"), std::string::npos);
  }
  EXPECT_EQ(DecodeWatchEvent("\xff").error().message, "watch event is not JSON: ?");
}

TEST(K8sQueryEscapeTest, EscapesSelectorCharacters) {
  EXPECT_EQ(QueryEscape("app=web,tier!=db"), "app%3Dweb%2Ctier%21%3Ddb");
  EXPECT_EQ(QueryEscape("a-b_c.d~"), "a-b_c.d~");
}

class K8sRestClientTest : public ::testing::Test {
 protected:
  K8sRestClientTest() {
    config_.token = TokenSource::Fixed("tok");
    RestOptions options;
    options.qps = 0;  // unlimited in tests
    options.observer = counters_.Observer();
    client_ = std::make_unique<RestClient>(server_, config_, options);
  }
  Json ConfigMap(const std::string& name, Json data = Json::object()) {
    return {{"apiVersion", "v1"},
            {"kind", "ConfigMap"},
            {"metadata", {{"name", name}, {"labels", {{"app", "x"}}}}},
            {"data", data}};
  }
  FakeApiServer server_;
  ClientConfig config_;
  RequestCounters counters_;
  std::unique_ptr<RestClient> client_;
};

TEST_F(K8sRestClientTest, CrudRoundTripWithConflictsAndNotFound) {
  auto cms = ConfigMaps("ns");
  auto created = client_->Create(cms, ConfigMap("a", {{"k", "1"}}));
  ASSERT_TRUE(created.ok()) << created.error().ToString();
  EXPECT_EQ((*created)["metadata"]["namespace"], "ns");

  auto again = client_->Create(cms, ConfigMap("a"));
  ASSERT_FALSE(again.ok());
  EXPECT_TRUE(again.error().IsAlreadyExists());

  auto got = client_->Get(cms.Named("a"));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)["data"]["k"], "1");

  Json fresh = *got;
  fresh["data"]["k"] = "2";
  ASSERT_TRUE(client_->Update(cms.Named("a"), fresh).ok());
  // The same (now stale) resourceVersion again: optimistic concurrency says no.
  fresh["data"]["k"] = "3";
  auto stale = client_->Update(cms.Named("a"), fresh);
  ASSERT_FALSE(stale.ok());
  EXPECT_TRUE(stale.error().IsConflict());
  EXPECT_EQ(stale.error().code, 409);

  auto merged = client_->Patch(cms.Named("a"), PatchType::kMerge, {{"data", {{"m", "yes"}}}});
  ASSERT_TRUE(merged.ok());
  EXPECT_EQ((*merged)["data"]["m"], "yes");
  EXPECT_EQ((*merged)["data"]["k"], "2");

  auto jsonp = client_->Patch(cms.Named("a"), PatchType::kJson,
                              Json::array({{{"op", "remove"}, {"path", "/data/k"}}}));
  ASSERT_TRUE(jsonp.ok());
  EXPECT_FALSE((*jsonp)["data"].contains("k"));

  ListOptions by_label;
  by_label.label_selector = "app=x";
  auto list = client_->List(ConfigMaps("ns"), by_label);
  ASSERT_TRUE(list.ok());
  EXPECT_EQ((*list)["items"].size(), 1u);

  DeleteOptions del;
  del.propagation_policy = "Foreground";
  del.grace_period_seconds = 0;
  ASSERT_TRUE(client_->Delete(cms.Named("a"), del).ok());
  auto missing = client_->Get(cms.Named("a"));
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(missing.error().IsNotFound());
  EXPECT_TRUE(client_->Delete(cms.Named("a")).error().IsNotFound());

  // The wire: verbs, paths, content types, the token, the delete options.
  auto requests = server_.Requests();
  for (const auto& r : requests)
    EXPECT_EQ(r.headers.at("Authorization"), "Bearer tok");
  auto find = [&](const std::string& method, const std::string& ct) {
    for (const auto& r : requests) {
      auto it = r.headers.find("Content-Type");
      if (r.method == method && (ct.empty() || (it != r.headers.end() && it->second == ct))) {
        return r;
      }
    }
    ADD_FAILURE() << "no " << method << " " << ct;
    return HttpRequest{};
  };
  EXPECT_EQ(find("POST", "").path, "/api/v1/namespaces/ns/configmaps");
  EXPECT_EQ(find("PATCH", "application/merge-patch+json").path,
            "/api/v1/namespaces/ns/configmaps/a");
  find("PATCH", "application/json-patch+json");
  Json del_body = Json::parse(find("DELETE", "").body);
  EXPECT_EQ(del_body["propagationPolicy"], "Foreground");
  EXPECT_EQ(del_body["gracePeriodSeconds"], 0);
  bool saw_selector = false;
  for (const auto& r : requests)
    saw_selector |= r.path == "/api/v1/namespaces/ns/configmaps?labelSelector=app%3Dx";
  EXPECT_TRUE(saw_selector);

  // api_requests_total{verb,code}
  EXPECT_EQ(counters_.Get("create", 201), 1);
  EXPECT_EQ(counters_.Get("create", 409), 1);
  EXPECT_EQ(counters_.Get("update", 409), 1);
  EXPECT_EQ(counters_.Get("patch", 200), 2);
  EXPECT_EQ(counters_.Get("get", 404), 1);
  EXPECT_EQ(counters_.Get("delete", 404), 1);
}

TEST_F(K8sRestClientTest, StatusSubresourceChangesOnlyStatus) {
  auto cms = ConfigMaps("ns");
  ASSERT_TRUE(client_->Create(cms, ConfigMap("s", {{"k", "1"}})).ok());
  auto patched = client_->PatchStatus(cms.Named("s"), PatchType::kMerge,
                                      {{"status", {{"phase", "Running"}}}, {"data", {{"k", "9"}}}});
  ASSERT_TRUE(patched.ok());
  EXPECT_EQ((*patched)["status"]["phase"], "Running");
  EXPECT_EQ((*patched)["data"]["k"], "1");
  Json obj = *patched;
  obj["status"]["phase"] = "Done";
  auto updated = client_->UpdateStatus(cms.Named("s"), obj);
  ASSERT_TRUE(updated.ok());
  EXPECT_EQ((*updated)["status"]["phase"], "Done");
  EXPECT_EQ(server_.CountRequests("PUT", "/api/v1/namespaces/ns/configmaps/s/status"), 1u);
}

TEST_F(K8sRestClientTest, TransportFailuresAreValuesWithCodeZero) {
  server_.FailNext("GET", 1, 0);
  auto r = client_->Get(ConfigMaps("ns").Named("x"));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.error().IsTransport());
  EXPECT_TRUE(r.error().IsRetryable());
  EXPECT_EQ(counters_.Get("get", 0), 1);
  server_.FailNext("GET", 1, 500);
  r = client_->Get(ConfigMaps("ns").Named("x"));
  EXPECT_EQ(r.error().code, 500);
}

// An answer that is no usable JSON object is an error that says what came back.
TEST(K8sRestClientResponseTest, UnusableAnswersAreErrorsThatSayWhy) {
  struct Case {
    const char* name;
    HttpResponse response;
    int code;
    std::string reason, message;  // message: a substring
  };
  const Case cases[] = {
      {"200 that is not JSON",
       {200, {}, "<html>sign in</html>"},
       200,
       "InvalidResponse",
       "not JSON: <html>sign in</html>"},
      {"redirect",
       {301, {{"location", "https://10.0.0.1:6443/api"}}, ""},
       301,
       "Redirect",
       "redirected to https://10.0.0.1:6443/api,"},
      {"300", {300, {}, ""}, 300, "Redirect", "(no Location)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    CannedTransport transport(c.response);
    RestClient client(transport, ClientConfig{}, Unlimited());
    auto got = client.Get(ConfigMaps("ns").Named("x"));
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.error().code, c.code);
    EXPECT_EQ(got.error().reason, c.reason);
    EXPECT_NE(got.error().message.find(c.message), std::string::npos) << got.error().message;
  }
}

// What every request carries: Accept, the bearer token (none when it is empty), and the
// client's timeout.
TEST(K8sRestClientRequestTest, CarriesAcceptTheTokenAndTheClientsTimeout) {
  CannedTransport transport({200, {}, "{}"});
  RestOptions options = Unlimited();
  options.timeout = 1234ms;
  ClientConfig with_token;
  with_token.token = TokenSource::Fixed("tok");
  ClientConfig empty_token;
  empty_token.token = TokenSource::Fixed("");
  ASSERT_TRUE(RestClient(transport, with_token, options).Get(ConfigMaps("ns").Named("a")).ok());
  ASSERT_TRUE(RestClient(transport, empty_token, options).Get(ConfigMaps("ns").Named("a")).ok());
  ASSERT_EQ(transport.requests.size(), 2u);
  EXPECT_EQ(transport.requests[0].headers.at("Accept"), "application/json");
  EXPECT_EQ(transport.requests[0].headers.at("Authorization"), "Bearer tok");
  EXPECT_EQ(transport.requests[0].timeout, 1234ms);
  EXPECT_EQ(transport.requests[1].headers.count("Authorization"), 0u) << "no empty bearer token";
}

TEST(K8sRestClientRequestTest, ABodyWithInvalidUtf8IsSentWithReplacementCharacters) {
  CannedTransport transport({201, {}, "{}"});
  RestClient client(transport, ClientConfig{}, Unlimited());
  const Json object = {{"metadata", {{"name", "a"}}}, {"data", {{"k", "bad \xC3 byte"}}}};
  ASSERT_TRUE(client.Create(ConfigMaps("ns"), object).ok());
  ASSERT_EQ(transport.requests.size(), 1u);
  EXPECT_EQ(Json::parse(transport.requests[0].body)["data"]["k"], "bad \xEF\xBF\xBD byte");
}

TEST_F(K8sRestClientTest, ListAndWatchOptionsBecomeQueryParameters) {
  auto cms = ConfigMaps("ns");
  ListOptions list;
  list.label_selector = "app=x";
  list.field_selector = "metadata.name=a";
  list.resource_version = "5";
  list.limit = 10;
  list.continue_token = "ns/b";
  ASSERT_TRUE(client_->List(cms, list).ok());
  EXPECT_EQ(server_.Requests().back().path,
            "/api/v1/namespaces/ns/configmaps?labelSelector=app%3Dx"
            "&fieldSelector=metadata.name%3Da&resourceVersion=5&limit=10&continue=ns%2Fb");

  // Each watch gets one event (from `from`) and ends there.
  const std::string from = std::to_string(server_.ResourceVersion());
  ASSERT_TRUE(client_->Create(cms, ConfigMap("a")).ok());
  struct Case {
    WatchOptions options;
    std::string query;
    std::chrono::milliseconds timeout;  // of the request: the watch's own plus a margin
  };
  const Case cases[] = {
      {{"app=x", "metadata.name=a", from, true, 5, nullptr},
       "watch=true&labelSelector=app%3Dx&fieldSelector=metadata.name%3Da&resourceVersion=" + from +
           "&allowWatchBookmarks=true&timeoutSeconds=5",
       90s},
      {{"", "", from, false, 0, nullptr}, "watch=true&resourceVersion=" + from, 90s},
      {{"", "", from, true, 300, nullptr},
       "watch=true&resourceVersion=" + from + "&allowWatchBookmarks=true&timeoutSeconds=300",
       330s},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.query);
    Cancellation cancel;
    int events = 0;
    Status s = client_->Watch(
        cms, c.options,
        [&](const WatchEvent&) {
          ++events;
          return false;
        },
        cancel);
    EXPECT_TRUE(s.ok());
    EXPECT_EQ(events, 1);
    const HttpRequest sent = server_.Requests().back();
    EXPECT_EQ(sent.path, "/api/v1/namespaces/ns/configmaps?" + c.query);
    EXPECT_EQ(sent.timeout, c.timeout);
  }
}

// Of a filtered list, the items keep what the filter keeps; the list keeps its own metadata
// (resourceVersion, continue), which the reflector resumes from.
TEST_F(K8sRestClientTest, AFilteredListKeepsItsOwnMetadata) {
  ASSERT_TRUE(client_->Create(ConfigMaps("ns"), ConfigMap("a", {{"k", "1"}})).ok());
  ListOptions names_only;
  names_only.item_filter =
      std::make_shared<const FieldFilter>(FieldFilter::Keep({"metadata.name"}));
  auto list = client_->List(ConfigMaps("ns"), names_only);
  ASSERT_TRUE(list.ok());
  EXPECT_EQ((*list)["metadata"]["resourceVersion"], std::to_string(server_.ResourceVersion()));
  EXPECT_EQ((*list)["items"], Json::array({{{"metadata", {{"name", "a"}}}}}));
}

TEST_F(K8sRestClientTest, DeleteSendsItsPreconditions) {
  ASSERT_TRUE(client_->Create(ConfigMaps("ns"), ConfigMap("a")).ok());
  DeleteOptions del;
  del.precondition_uid = "uid-1";
  del.precondition_resource_version = std::to_string(server_.ResourceVersion());
  ASSERT_TRUE(client_->Delete(ConfigMaps("ns").Named("a"), del).ok());
  const Json body = Json::parse(server_.Requests().back().body);
  EXPECT_EQ(body["kind"], "DeleteOptions");
  EXPECT_EQ(body["preconditions"],
            Json({{"uid", "uid-1"}, {"resourceVersion", *del.precondition_resource_version}}));
  EXPECT_FALSE(body.contains("propagationPolicy"));
}

// A watch that fails is that error; one cancelled while it streams ends Ok, as one the server
// ended.
TEST_F(K8sRestClientTest, WatchFailuresAreErrorsButACancelledWatchEndsOk) {
  auto cms = ConfigMaps("ns");
  const auto forever = [](const WatchEvent&) { return true; };
  Cancellation never;
  server_.FailNext("GET", 1, 500);
  Status s = client_->Watch(cms, {}, forever, never);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, 500);
  server_.FailNext("GET", 1, 0);
  s = client_->Watch(cms, {}, forever, never);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(s.error().IsTransport());

  WatchOptions from;
  from.resource_version = std::to_string(server_.ResourceVersion());
  ASSERT_TRUE(client_->Create(cms, ConfigMap("w")).ok());
  Cancellation cancel;
  s = client_->Watch(
      cms, from,
      [&](const WatchEvent&) {
        cancel.Cancel();
        return true;
      },
      cancel);
  EXPECT_TRUE(s.ok()) << s.error().ToString();
  EXPECT_EQ(counters_.Get("watch", 500), 1);
  EXPECT_EQ(counters_.Get("watch", 0), 2);
}

TEST_F(K8sRestClientTest, WatchDeliversEventsAndEndsOnGone) {
  auto cms = ConfigMaps("ns");
  ASSERT_TRUE(client_->Create(cms, ConfigMap("w1")).ok());
  std::string from = std::to_string(server_.ResourceVersion());
  ASSERT_TRUE(client_->Create(cms, ConfigMap("w2")).ok());
  ASSERT_TRUE(client_->Delete(cms.Named("w1")).ok());

  std::vector<std::string> seen;
  Cancellation cancel;
  WatchOptions from_rv;
  from_rv.resource_version = from;
  Status s = client_->Watch(
      cms, from_rv,
      [&](const WatchEvent& e) {
        seen.push_back(e.type + " " + e.object["metadata"]["name"].get<std::string>());
        return seen.size() < 2;
      },
      cancel);
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(seen, (std::vector<std::string>{"ADDED w2", "DELETED w1"}));
  EXPECT_NE(server_.Requests().back().path.find("allowWatchBookmarks=true"), std::string::npos);

  server_.Compact();
  s = client_->Watch(
      cms, from_rv, [](const WatchEvent&) { return true; }, cancel);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(s.error().IsGone());
  EXPECT_EQ(s.error().code, 410);
}

TEST(K8sTokenBucketTest, BurstIsFreeThenRequestsQueueAtTheRate) {
  TokenBucket bucket(10, 3);  // 10/s, burst 3
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(bucket.Reserve(), TokenBucket::Clock::duration::zero());
  // The 4th, 5th, 6th wait about 100, 200, 300 ms (each queues behind the previous).
  auto d4 = bucket.Reserve(), d5 = bucket.Reserve(), d6 = bucket.Reserve();
  EXPECT_GT(d4, std::chrono::milliseconds(50));
  EXPECT_LE(d4, std::chrono::milliseconds(100));
  EXPECT_GT(d5, d4 + std::chrono::milliseconds(50));
  EXPECT_GT(d6, d5 + std::chrono::milliseconds(50));
  TokenBucket unlimited(0, 1);
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(unlimited.Reserve(), TokenBucket::Clock::duration::zero());
}

// After an idle spell the bucket holds no more than `burst` tokens; a burst below 1 is 1.
TEST(K8sTokenBucketTest, RefillsUpToTheBurstOnly) {
  TokenBucket bucket(100, 1);  // a token every 10 ms, at most one held
  EXPECT_EQ(bucket.Reserve(), TokenBucket::Clock::duration::zero());
  const auto idle_until = TokenBucket::Clock::now() + std::chrono::milliseconds(50);
  while (TokenBucket::Clock::now() < idle_until)
    std::this_thread::yield();  // five tokens' worth of time passes
  EXPECT_EQ(bucket.Reserve(), TokenBucket::Clock::duration::zero());
  EXPECT_GT(bucket.Reserve(), TokenBucket::Clock::duration::zero()) << "only one was kept";

  TokenBucket no_burst(10, 0);
  EXPECT_EQ(no_burst.Reserve(), TokenBucket::Clock::duration::zero());
  EXPECT_GT(no_burst.Reserve(), TokenBucket::Clock::duration::zero());
}

// Wait is true once the delay has passed, false at once when already cancelled.
TEST(K8sTokenBucketTest, WaitWaitsOutTheDelayUnlessCancelled) {
  TokenBucket bucket(100, 1);
  Cancellation never;
  EXPECT_TRUE(bucket.Wait(&never));
  EXPECT_TRUE(bucket.Wait(&never)) << "after about 10 ms";
  EXPECT_TRUE(bucket.Wait());
  Cancellation cancelled;
  cancelled.Cancel();
  TokenBucket full(10, 5);
  EXPECT_FALSE(full.Wait(&cancelled)) << "though a token was free";
}

// At shutdown (RestOptions::cancel) a call waiting for the rate limiter ends at once, and no
// later call is sent; a call whose deadline the limiter's delay would pass is not sent either.
TEST(K8sRestClientCancellationTest, CancellationAndDeadlinesEndCallsWaitingForTheRateLimiter) {
  FakeApiServer server;
  Cancellation shutdown;
  RestOptions options;
  options.qps = 0.01;  // after the first call, the next waits 100 s
  options.burst = 1;
  options.cancel = &shutdown;
  RestClient client(server, ClientConfig{}, options);
  const ResourceRef cm = ConfigMaps("ns").Named("cm");
  ASSERT_TRUE(client.Get(cm).error().IsNotFound());

  auto start = std::chrono::steady_clock::now();
  auto late = client.Get(cm, {.deadline = start + 10s});  // the limiter would wait 100 s
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.error().reason, "Timeout");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s) << "gave up at once, not at 10 s";

  auto waiting = std::async(std::launch::async, [&] { return client.Get(cm); });
  EXPECT_EQ(waiting.wait_for(50ms), std::future_status::timeout) << "waits for the limiter";
  shutdown.Cancel();
  ASSERT_EQ(waiting.wait_for(5s), std::future_status::ready);
  auto cancelled = waiting.get();
  ASSERT_FALSE(cancelled.ok());
  EXPECT_EQ(cancelled.error().reason, "Cancelled");
  EXPECT_EQ(cancelled.error().code, 0);
  EXPECT_EQ(client.Create(cm.Named(""), {{"metadata", {{"name", "cm"}}}}).error().reason,
            "Cancelled");
  EXPECT_EQ(server.CountRequests("GET", "/api/v1"), 1u) << "only the first call was sent";
  EXPECT_EQ(server.CountRequests("POST", "/api/v1"), 0u);

  // A call's own cancellation, on a client without one.
  RestClient plain(server, ClientConfig{});
  Cancellation call_cancel;
  call_cancel.Cancel();
  CallOptions call;
  call.cancel = &call_cancel;
  EXPECT_EQ(plain.Get(cm, call).error().reason, "Cancelled");
  EXPECT_EQ(server.CountRequests("GET", "/api/v1"), 1u);

  // A deadline already passed: not sent, though the limiter has tokens to spare.
  auto past = plain.Get(cm, {.deadline = std::chrono::steady_clock::now() - 1ms});
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.error().reason, "Timeout");
  EXPECT_EQ(server.CountRequests("GET", "/api/v1"), 1u);

  // A call with a cancellation of its own still ends at the client's shutdown.
  Cancellation shutdown_too, own;
  RestOptions with_own = options;
  with_own.cancel = &shutdown_too;
  RestClient client_too(server, ClientConfig{}, with_own);
  ASSERT_TRUE(client_too.Get(cm).error().IsNotFound());  // takes the one token
  CallOptions own_call;
  own_call.cancel = &own;
  auto waiting_too = std::async(std::launch::async, [&] { return client_too.Get(cm, own_call); });
  EXPECT_EQ(waiting_too.wait_for(50ms), std::future_status::timeout) << "waits for the limiter";
  shutdown_too.Cancel();
  const bool ended = waiting_too.wait_for(5s) == std::future_status::ready;
  own.Cancel();  // frees it either way
  EXPECT_TRUE(ended) << "the client's shutdown left a call with its own cancellation waiting";
  EXPECT_EQ(waiting_too.get().error().reason, "Cancelled");
}

}  // namespace
}  // namespace tessera::k8s
