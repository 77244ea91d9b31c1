// Reflector and informer against the in-memory API server: sync, paged lists, selectors,
// handlers, indexes, bookmarks, resuming a closed watch, relisting after 410 Gone, back-off
// after failures.
#include "controller/k8s/informer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "tests/unit/k8s/fake_apiserver.h"

namespace tessera::k8s {
namespace {

using namespace std::chrono_literals;
using testing::FakeApiServer;

// Collects handler calls as strings ("add a", "update a", "delete a"); waits on a condition
// variable for a given call.
class Journal {
 public:
  InformerHandlers Handlers() {
    return {[this](const ObjectPtr& o) { Push("add " + Name(*o)); },
            [this](const ObjectPtr&, const ObjectPtr& o) { Push("update " + Name(*o)); },
            [this](const ObjectPtr& o) { Push("delete " + Name(*o)); }};
  }
  // True once `entry` has been recorded (within 10 s).
  bool WaitFor(const std::string& entry) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, 10s, [&] {
      return std::find(entries_.begin(), entries_.end(), entry) != entries_.end();
    });
  }
  std::vector<std::string> Entries() {
    std::lock_guard<std::mutex> lock(mu_);
    return entries_;
  }

 private:
  static std::string Name(const Json& o) { return o["metadata"]["name"].get<std::string>(); }
  void Push(std::string s) {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.push_back(std::move(s));
    cv_.notify_all();
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> entries_;
};

// Waits until `pred` holds, up to 10 s.
template <typename Pred>
bool Eventually(Pred pred) {
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred())
      return true;
    std::this_thread::yield();
  }
  return pred();
}

class K8sInformerTest : public ::testing::Test {
 protected:
  K8sInformerTest() : client_(server_, ClientConfig{}, Unlimited()) {}
  static RestOptions Unlimited() {
    RestOptions o;
    o.qps = 0;
    return o;
  }
  Json Pod(const std::string& name, const std::string& job, const std::string& owner_uid) {
    return {{"metadata",
             {{"name", name},
              {"labels", {{"job", job}}},
              {"ownerReferences", Json::array({{{"uid", owner_uid}, {"kind", "TrainingJob"}}})}}}};
  }
  InformerOptions FastBackoff() {
    InformerOptions o;
    o.reflector.backoff.initial = 1ms;
    o.reflector.backoff.max = 5ms;
    return o;
  }
  FakeApiServer server_;
  RestClient client_;
};

TEST_F(K8sInformerTest, SyncsThenFollowsAddsUpdatesAndDeletes) {
  ASSERT_TRUE(client_.Create(Pods("ns"), Pod("p0", "a", "u1")).ok());
  Informer informer(client_, Pods("ns"), FastBackoff());
  Journal journal;
  informer.AddHandlers(journal.Handlers());
  EXPECT_FALSE(informer.HasSynced());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(10s));
  EXPECT_EQ(journal.Entries(), std::vector<std::string>{"add p0"}) << "add ran before synced";
  ASSERT_TRUE(server_.WaitForWatches(1, 10s));

  ASSERT_TRUE(client_.Create(Pods("ns"), Pod("p1", "a", "u1")).ok());
  ASSERT_TRUE(journal.WaitFor("add p1"));
  ASSERT_TRUE(
      client_.Patch(Pods("ns").Named("p1"), PatchType::kMerge, {{"spec", {{"x", 1}}}}).ok());
  ASSERT_TRUE(journal.WaitFor("update p1"));
  EXPECT_EQ((*informer.Get("ns/p1"))["spec"]["x"], 1);
  ASSERT_TRUE(client_.Delete(Pods("ns").Named("p0")).ok());
  ASSERT_TRUE(journal.WaitFor("delete p0"));
  EXPECT_EQ(informer.Get("ns/p0"), nullptr);
  EXPECT_EQ(informer.List().size(), 1u);
  informer.Stop();
  EXPECT_EQ(server_.CountRequests("GET", "/api/v1/namespaces/ns/pods?limit="), 1u) << "one list";
}

// A list refused (no CRD, no permission) keeps the informer unsynced and retrying; each
// failure reaches on_error, which is how the controller's log says why it is not ready.
TEST_F(K8sInformerTest, FailedListsReachOnErrorUntilOneSucceeds) {
  server_.FailNext("GET", 2, 403);
  InformerOptions options = FastBackoff();
  std::mutex mu;
  std::vector<std::pair<int, bool>> errors;
  options.on_error = [&](const ApiError& error, bool relist) {
    std::lock_guard<std::mutex> lock(mu);
    errors.emplace_back(error.code, relist);
  };
  Informer informer(client_, Pods("ns"), std::move(options));
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(10s));
  informer.Stop();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(errors, (std::vector<std::pair<int, bool>>{{403, true}, {403, true}}));
}

TEST_F(K8sInformerTest, IndexesByLabelAndOwnerFollowChanges) {
  Informer informer(client_, Pods("ns"), FastBackoff());
  informer.AddIndex("job", IndexByLabel("job"));
  informer.AddIndex("owner", IndexByOwnerUid());
  Journal journal;
  informer.AddHandlers(journal.Handlers());
  ASSERT_TRUE(client_.Create(Pods("ns"), Pod("a0", "a", "uid-a")).ok());
  ASSERT_TRUE(client_.Create(Pods("ns"), Pod("a1", "a", "uid-a")).ok());
  ASSERT_TRUE(client_.Create(Pods("ns"), Pod("b0", "b", "uid-b")).ok());
  ASSERT_TRUE(client_.Create(Pods("ns"), Pod("c0", "c", "")).ok());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(10s));
  EXPECT_EQ(informer.ByIndex("job", "a").size(), 2u);
  EXPECT_EQ(informer.ByIndex("owner", "uid-b").size(), 1u);
  EXPECT_TRUE(informer.ByIndex("owner", "").empty()) << "an owner without a uid indexes nothing";
  EXPECT_TRUE(informer.ByIndex("job", "zzz").empty());
  EXPECT_TRUE(informer.ByIndex("no-such-index", "a").empty());

  // Relabel a1 to job b: it moves between index values.
  ASSERT_TRUE(client_
                  .Patch(Pods("ns").Named("a1"), PatchType::kMerge,
                         {{"metadata", {{"labels", {{"job", "b"}}}}}})
                  .ok());
  ASSERT_TRUE(journal.WaitFor("update a1"));
  EXPECT_EQ(informer.ByIndex("job", "a").size(), 1u);
  EXPECT_EQ(informer.ByIndex("job", "b").size(), 2u);
  ASSERT_TRUE(client_.Delete(Pods("ns").Named("b0")).ok());
  ASSERT_TRUE(journal.WaitFor("delete b0"));
  EXPECT_TRUE(informer.ByIndex("owner", "uid-b").empty());
  // Created again under another owner: only the new owner finds it.
  ASSERT_TRUE(client_.Create(Pods("ns"), Pod("b0", "b", "uid-c")).ok());
  ASSERT_TRUE(Eventually([&] { return informer.ByIndex("owner", "uid-c").size() == 1; }));
  EXPECT_TRUE(informer.ByIndex("owner", "uid-b").empty());
}

TEST_F(K8sInformerTest, CachedObjectsAreImmutableSnapshots) {
  ASSERT_TRUE(client_.Create(Pods("ns"), Pod("p", "a", "u")).ok());
  Informer informer(client_, Pods("ns"), FastBackoff());
  Journal journal;
  informer.AddHandlers(journal.Handlers());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(10s));
  ObjectPtr before = informer.Get("ns/p");
  ASSERT_TRUE(client_.Patch(Pods("ns").Named("p"), PatchType::kMerge, {{"spec", {{"v", 2}}}}).ok());
  ASSERT_TRUE(journal.WaitFor("update p"));
  EXPECT_FALSE(before->contains("spec")) << "a reader's snapshot never changes under it";
  EXPECT_EQ((*informer.Get("ns/p"))["spec"]["v"], 2);
}

// The cache packs objects (MessagePack); what a reader gets back is the object as the server
// sent it, value types included.
TEST_F(K8sInformerTest, CachedObjectsComeBackWithTheirValuesAndTypes) {
  Json pod = Pod("p", "a", "u");
  pod["spec"] = {{"negative", -3},
                 {"large", 9007199254740993LL},
                 {"ratio", 0.25},
                 {"whole", 2.0},
                 {"flag", false},
                 {"none", nullptr},
                 {"text", "gr\u00fc\u00dfe \"quoted\""},
                 {"nested", Json::array({Json::array({1, 2}), Json::object(), {{"k", "v"}}})}};
  ASSERT_TRUE(client_.Create(Pods("ns"), pod).ok());
  Informer informer(client_, Pods("ns"), FastBackoff());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(10s));
  ObjectPtr cached = informer.Get("ns/p");
  ASSERT_NE(cached, nullptr);
  EXPECT_EQ((*cached)["spec"], pod["spec"]);
  EXPECT_TRUE((*cached)["spec"]["ratio"].is_number_float());
  EXPECT_TRUE((*cached)["spec"]["whole"].is_number_float());
  EXPECT_TRUE((*cached)["spec"]["large"].is_number_integer());
  EXPECT_EQ((*cached)["spec"]["large"].get<std::int64_t>(), 9007199254740993LL);
  EXPECT_EQ((*cached)["metadata"]["labels"]["job"], "a");
  ASSERT_EQ(informer.List().size(), 1u);
  EXPECT_EQ(*informer.List()[0], *cached);
}

TEST_F(K8sInformerTest, ManagedFieldsAreDroppedUnlessTheTransformIsCleared) {
  Json pod = Pod("p", "a", "u");
  pod["metadata"]["managedFields"] = Json::array({{{"manager", "kubectl"}}});
  ASSERT_TRUE(client_.Create(Pods("ns"), pod).ok());
  Informer stripped(client_, Pods("ns"), FastBackoff());
  InformerOptions raw_options = FastBackoff();
  raw_options.transform = nullptr;
  Informer raw(client_, Pods("ns"), raw_options);
  stripped.Start();
  raw.Start();
  ASSERT_TRUE(stripped.WaitForSync(10s));
  ASSERT_TRUE(raw.WaitForSync(10s));
  EXPECT_FALSE((*stripped.Get("ns/p"))["metadata"].contains("managedFields"));
  EXPECT_EQ((*stripped.Get("ns/p"))["metadata"]["labels"]["job"], "a");
  EXPECT_TRUE((*raw.Get("ns/p"))["metadata"].contains("managedFields"));
}

TEST_F(K8sInformerTest, AnObjectFilterCutsListedAndWatchedObjectsAlike) {
  Json listed = Pod("listed", "a", "u");
  listed["spec"] = {{"nodeName", "n1"}, {"containers", Json::array({{{"name", "w"}}})}};
  ASSERT_TRUE(client_.Create(Pods("ns"), listed).ok());
  InformerOptions options = FastBackoff();
  options.reflector.object_filter = std::make_shared<const FieldFilter>(FieldFilter::Keep(
      {"metadata.name", "metadata.namespace", "metadata.resourceVersion", "spec.nodeName"}));
  Informer informer(client_, Pods("ns"), options);
  Journal journal;
  informer.AddHandlers(journal.Handlers());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(10s));
  ASSERT_TRUE(server_.WaitForWatches(1, 10s));
  Json watched = listed;
  watched["metadata"]["name"] = "watched";
  ASSERT_TRUE(client_.Create(Pods("ns"), watched).ok());
  ASSERT_TRUE(journal.WaitFor("add watched"));
  for (const char* name : {"listed", "watched"}) {
    ObjectPtr pod = informer.Get(std::string("ns/") + name);
    ASSERT_NE(pod, nullptr) << name;
    EXPECT_EQ((*pod)["spec"], Json({{"nodeName", "n1"}})) << name;
    EXPECT_FALSE((*pod)["metadata"].contains("labels")) << name;
    EXPECT_FALSE((*pod)["metadata"]["resourceVersion"].get<std::string>().empty()) << name;
  }
  // The watch resumes from the filtered objects' resourceVersion.
  const std::string rv = std::to_string(server_.ResourceVersion());
  EXPECT_TRUE(Eventually([&] { return informer.LastResourceVersion() == rv; }));
}

TEST_F(K8sInformerTest, ClosedWatchResumesFromLastVersionIncludingBookmarks) {
  Informer informer(client_, Pods("ns"), FastBackoff());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(10s));
  ASSERT_TRUE(server_.WaitForWatches(1, 10s));
  server_.Bookmark();
  std::string rv = std::to_string(server_.ResourceVersion());
  ASSERT_TRUE(Eventually([&] { return informer.LastResourceVersion() == rv; }));
  server_.CloseWatches();
  ASSERT_TRUE(Eventually([&] {
    for (const auto& r : server_.Requests()) {
      if (r.path.find("watch=true") != std::string::npos &&
          r.path.find("resourceVersion=" + rv) != std::string::npos) {
        return true;
      }
    }
    return false;
  }));
  EXPECT_EQ(server_.CountRequests("GET", "/api/v1/namespaces/ns/pods?limit="), 1u)
      << "a normally closed watch resumes without relisting";
}

TEST_F(K8sInformerTest, RelistsAfterGoneAndReportsWhatChangedMeanwhile) {
  ASSERT_TRUE(client_.Create(Pods("ns"), Pod("stays", "a", "u")).ok());
  ASSERT_TRUE(client_.Create(Pods("ns"), Pod("goes", "a", "u")).ok());
  ASSERT_TRUE(client_.Create(Pods("ns"), Pod("changes", "a", "u")).ok());
  InformerOptions options = FastBackoff();
  std::atomic<int> restarts{0};
  options.reflector.on_watch_restart = [&] { ++restarts; };
  Informer informer(client_, Pods("ns"), options);
  Journal journal;
  informer.AddHandlers(journal.Handlers());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(10s));
  ASSERT_TRUE(server_.WaitForWatches(1, 10s));

  // While the watch is stalled, objects change and the history is compacted: resuming from
  // the informer's resourceVersion gets 410 Gone, so it must list again.
  server_.HoldWatches(true);
  ASSERT_TRUE(client_.Delete(Pods("ns").Named("goes")).ok());
  ASSERT_TRUE(client_.Create(Pods("ns"), Pod("new", "a", "u")).ok());
  ASSERT_TRUE(
      client_.Patch(Pods("ns").Named("changes"), PatchType::kMerge, {{"spec", {{"v", 2}}}}).ok());
  server_.Compact();
  server_.CloseWatches();
  server_.HoldWatches(false);

  ASSERT_TRUE(journal.WaitFor("delete goes"));
  ASSERT_TRUE(journal.WaitFor("add new"));
  ASSERT_TRUE(journal.WaitFor("update changes"));
  EXPECT_EQ((*informer.Get("ns/changes"))["spec"]["v"], 2);
  EXPECT_EQ(restarts.load(), 1);
  EXPECT_EQ(server_.CountRequests("GET", "/api/v1/namespaces/ns/pods?limit="), 2u);
  EXPECT_NE(informer.Get("ns/stays"), nullptr);
  EXPECT_EQ(informer.Get("ns/goes"), nullptr);
  auto entries = journal.Entries();
  EXPECT_EQ(std::count(entries.begin(), entries.end(), "update stays"), 0)
      << "unchanged objects are not reported again on relist";
}

TEST_F(K8sInformerTest, ReflectorBacksOffAndRetriesFailedLists) {
  server_.FailNext("GET", 3, 500);
  ReflectorOptions options;
  options.backoff.initial = 1ms;
  options.backoff.max = 4ms;
  std::mutex mu;
  std::condition_variable cv;
  int errors = 0;
  size_t listed = 0;
  bool replaced = false;
  ReflectorSink sink;
  sink.replace = [&](std::vector<Json> items, const std::string&) {
    std::lock_guard<std::mutex> lock(mu);
    listed = items.size();
    replaced = true;
    cv.notify_all();
  };
  sink.error = [&](const ApiError& e, bool relist) {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(e.code, 500);
    EXPECT_TRUE(relist);
    ++errors;
  };
  ASSERT_TRUE(client_.Create(Pods("ns"), Pod("p", "a", "u")).ok());
  Reflector reflector(client_, Pods("ns"), options, sink);
  Cancellation stop;
  std::thread runner([&] { reflector.Run(stop); });
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return replaced; }));
    EXPECT_EQ(errors, 3);
    EXPECT_EQ(listed, 1u);
  }
  stop.Cancel();
  runner.join();
}

TEST(K8sKeyOfTest, NamespacedAndClusterScoped) {
  EXPECT_EQ(KeyOf({{"metadata", {{"name", "p"}, {"namespace", "ns"}}}}), "ns/p");
  EXPECT_EQ(KeyOf({{"metadata", {{"name", "node-1"}}}}), "node-1");
}

// A list larger than a page is read page by page (limit, then continue) and handed over whole,
// at the resourceVersion of the list.
TEST_F(K8sInformerTest, ListsInPagesAndSyncsWithEveryPage) {
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(client_.Create(Pods("ns"), Pod("p" + std::to_string(i), "a", "u")).ok());
  const std::string listed_at = std::to_string(server_.ResourceVersion());
  InformerOptions options = FastBackoff();
  options.reflector.page_size = 2;
  Informer informer(client_, Pods("ns"), options);
  Journal journal;
  informer.AddHandlers(journal.Handlers());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(10s));
  EXPECT_EQ(informer.List().size(), 5u);
  EXPECT_EQ(journal.Entries().size(), 5u);
  EXPECT_EQ(informer.LastResourceVersion(), listed_at);
  informer.Stop();
  std::vector<std::string> lists;
  for (const auto& r : server_.Requests()) {
    if (r.method == "GET" && r.path.find("watch=true") == std::string::npos)
      lists.push_back(r.path);
  }
  EXPECT_EQ(lists,
            (std::vector<std::string>{"/api/v1/namespaces/ns/pods?limit=2",
                                      "/api/v1/namespaces/ns/pods?limit=2&continue=ns%2Fp1",
                                      "/api/v1/namespaces/ns/pods?limit=2&continue=ns%2Fp3"}));
}

// The informer's selectors reach both the list and the watch (those of options.reflector are
// overwritten), and so do the reflector's watch options.
TEST_F(K8sInformerTest, SelectorsAndWatchOptionsReachTheListAndTheWatch) {
  ASSERT_TRUE(client_.Create(Pods("ns"), Pod("mine", "a", "u")).ok());
  ASSERT_TRUE(client_.Create(Pods("ns"), Pod("other", "b", "u")).ok());
  InformerOptions options = FastBackoff();
  options.label_selector = "job=a";
  options.field_selector = "spec.nodeName=n1";
  options.reflector.label_selector = "job=b";
  options.reflector.watch_timeout_seconds = 120;
  Informer informer(client_, Pods("ns"), options);
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(10s));
  ASSERT_TRUE(server_.WaitForWatches(1, 10s));
  informer.Stop();
  EXPECT_NE(informer.Get("ns/mine"), nullptr);
  EXPECT_EQ(informer.Get("ns/other"), nullptr) << "the server filtered by the label selector";
  const std::string rv = informer.LastResourceVersion();
  const auto requests = server_.Requests();
  ASSERT_EQ(requests.size(), 4u);  // two creates, the list, the watch
  EXPECT_EQ(requests[2].path,
            "/api/v1/namespaces/ns/pods?labelSelector=job%3Da&fieldSelector=spec.nodeName%3Dn1"
            "&limit=500");
  EXPECT_EQ(requests[3].path,
            "/api/v1/namespaces/ns/pods?watch=true&labelSelector=job%3Da"
            "&fieldSelector=spec.nodeName%3Dn1&resourceVersion=" +
                rv + "&allowWatchBookmarks=true&timeoutSeconds=120");
}

TEST_F(K8sInformerTest, StartsOnceAndStopsIdempotently) {
  Informer informer(client_, Pods("ns"), FastBackoff());
  informer.Start();
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(10s));
  ASSERT_TRUE(server_.WaitForWatches(1, 10s));
  informer.Stop();
  informer.Stop();
  EXPECT_EQ(server_.CountRequests("GET", "/api/v1/namespaces/ns/pods?limit="), 1u);
}

// A caller already waiting for the sync is woken by it, not by its own time-out.
TEST_F(K8sInformerTest, WaitForSyncWakesWhenTheFirstListLands) {
  InformerOptions options = FastBackoff();
  // The first list fails, so the waiter is surely waiting when the second one lands.
  server_.FailNext("GET", 1, 500);
  options.reflector.backoff.initial = options.reflector.backoff.max = 200ms;
  Informer informer(client_, Pods("ns"), options);
  auto synced = std::async(std::launch::async, [&] { return informer.WaitForSync(60s); });
  informer.Start();
  ASSERT_EQ(synced.wait_for(30s), std::future_status::ready) << "not woken by the sync";
  EXPECT_TRUE(synced.get());
}

// On delete, handlers get the final state the server reported (newer than the cached one),
// passed through the transform like every other object.
TEST_F(K8sInformerTest, DeleteHandlersGetTheServersFinalStateTransformed) {
  Json pod = Pod("p", "a", "u");
  pod["metadata"]["managedFields"] = Json::array({{{"manager", "kubectl"}}});
  ASSERT_TRUE(client_.Create(Pods("ns"), pod).ok());
  Informer informer(client_, Pods("ns"), FastBackoff());
  std::mutex mu;
  std::condition_variable cv;
  ObjectPtr deleted;
  informer.AddHandlers({nullptr, nullptr, [&](const ObjectPtr& o) {
                          std::lock_guard<std::mutex> lock(mu);
                          deleted = o;
                          cv.notify_all();
                        }});
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(10s));
  ASSERT_TRUE(server_.WaitForWatches(1, 10s));
  ASSERT_TRUE(client_.Delete(Pods("ns").Named("p")).ok());
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return deleted != nullptr; }));
  EXPECT_EQ((*deleted)["metadata"]["resourceVersion"], std::to_string(server_.ResourceVersion()));
  EXPECT_FALSE((*deleted)["metadata"].contains("managedFields"));
}

// The in-memory API server whose first watch requests follow a script, to put the reflector
// through each way a watch can end. Every watch request is recorded; unscripted ones go to the
// fake.
class ScriptedWatchServer : public FakeApiServer {
 public:
  struct Watch {
    std::vector<std::string> lines;  // sent in order, then the stream ends normally
    int status = 200;                // else this status, with a Status body, and no lines
  };
  void Script(std::vector<Watch> watches) {
    std::lock_guard<std::mutex> lock(mu_);
    script_.assign(watches.begin(), watches.end());
  }
  Result<HttpResponse> Stream(const HttpRequest& request,
                              const std::function<bool(std::string_view)>& on_line,
                              Cancellation& cancel) override {
    std::optional<Watch> scripted;
    {
      std::lock_guard<std::mutex> lock(mu_);
      watches_.push_back(request.path);
      cv_.notify_all();
      if (!script_.empty()) {
        scripted = std::move(script_.front());
        script_.pop_front();
      }
    }
    if (!scripted)
      return FakeApiServer::Stream(request, on_line, cancel);
    HttpResponse response;
    response.status = scripted->status;
    if (response.status != 200) {
      response.body = Json{{"kind", "Status"}, {"code", response.status}}.dump();
      return response;
    }
    for (const auto& line : scripted->lines) {
      if (!on_line(line))
        break;
    }
    return response;
  }
  // The paths of the watch requests so far.
  std::vector<std::string> WatchPaths() const {
    std::lock_guard<std::mutex> lock(mu_);
    return watches_;
  }
  // Waits until `n` watch requests have been made; false on time-out.
  bool WaitForWatchRequests(size_t n, std::chrono::milliseconds timeout) const {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return watches_.size() >= n; });
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::deque<Watch> script_;
  std::vector<std::string> watches_;
};

// How the reflector goes on after each way its watch can end. With a back-off of an hour, "at
// once" and "backs off" cannot be confused: a retry that waits never comes within the test.
TEST(K8sReflectorTest, ResumesRelistsOrBacksOffAccordingToHowTheWatchEnded) {
  const std::string added =
      R"({"type":"ADDED","object":{"metadata":{"name":"p","namespace":"ns","resourceVersion":"7"}}})";
  const std::string no_version = R"({"type":"MODIFIED","object":{"metadata":{"name":"p"}}})";
  const std::string expired =
      R"({"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}})";
  struct Case {
    const char* name;
    ScriptedWatchServer::Watch first;
    bool at_once;                              // the next watch follows without a back-off
    bool relists;                              // after a list (410 Gone)
    std::string resumes;                       // the next watch's resourceVersion ("" = the list's)
    std::vector<std::pair<int, bool>> errors;  // (code, relist) reported
  };
  const Case cases[] = {
      {"events, then the end", {{added}}, true, false, "7", {}},
      {"an event without a resourceVersion", {{no_version}}, true, false, "", {}},
      {"ended at once with nothing", {}, false, false, "", {}},
      {"500 response", {{}, 500}, false, false, "", {{500, false}}},
      {"410 response", {{}, 410}, true, true, "", {{410, true}}},
      {"410 ERROR event", {{expired}}, true, true, "", {{410, true}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ScriptedWatchServer server;
    RestOptions unlimited;
    unlimited.qps = 0;
    RestClient client(server, ClientConfig{}, unlimited);
    server.Script({c.first});
    ReflectorOptions options;
    options.backoff.initial = options.backoff.max = 1h;
    std::atomic<int> restarts{0};
    options.on_watch_restart = [&] { ++restarts; };
    std::mutex mu;
    std::vector<std::pair<int, bool>> errors;
    ReflectorSink sink;
    sink.error = [&](const ApiError& e, bool relist) {
      std::lock_guard<std::mutex> lock(mu);
      errors.emplace_back(e.code, relist);
    };
    Reflector reflector(client, Pods("ns"), options, sink);
    Cancellation stop;
    std::thread runner([&] { reflector.Run(stop); });
    ASSERT_TRUE(server.WaitForWatchRequests(1, 10s));
    const std::string listed_at = std::to_string(server.ResourceVersion());
    if (c.at_once) {
      EXPECT_TRUE(server.WaitForWatchRequests(2, 10s));
    } else {
      EXPECT_FALSE(server.WaitForWatchRequests(2, 300ms)) << "retried without backing off";
    }
    stop.Cancel();
    runner.join();
    EXPECT_EQ(server.CountRequests("GET", "/api/v1/namespaces/ns/pods?limit="),
              c.relists ? 2u : 1u);
    EXPECT_EQ(restarts.load(), c.relists ? 1 : 0);
    EXPECT_EQ(errors, c.errors);
    const auto watches = server.WatchPaths();
    if (c.at_once) {
      ASSERT_GE(watches.size(), 2u);
      const std::string rv = c.resumes.empty() ? listed_at : c.resumes;
      EXPECT_NE(watches[1].find("resourceVersion=" + rv + "&"), std::string::npos) << watches[1];
    }
  }
}

TEST(K8sReflectorTest, BacksOffAfterAFailedList) {
  FakeApiServer server;
  RestOptions unlimited;
  unlimited.qps = 0;
  RestClient client(server, ClientConfig{}, unlimited);
  server.FailNext("GET", 1, 500);
  ReflectorOptions options;
  options.backoff.initial = options.backoff.max = 1h;
  std::mutex mu;
  std::condition_variable cv;
  int errors = 0;
  bool replaced = false;
  ReflectorSink sink;
  sink.replace = [&](std::vector<Json>, const std::string&) {
    std::lock_guard<std::mutex> lock(mu);
    replaced = true;
    cv.notify_all();
  };
  sink.error = [&](const ApiError&, bool) {
    std::lock_guard<std::mutex> lock(mu);
    ++errors;
    cv.notify_all();
  };
  Reflector reflector(client, Pods("ns"), options, sink);
  Cancellation stop;
  std::thread runner([&] { reflector.Run(stop); });
  {
    std::unique_lock<std::mutex> lock(mu);
    EXPECT_TRUE(cv.wait_for(lock, 10s, [&] { return errors == 1; }));
    EXPECT_FALSE(cv.wait_for(lock, 300ms, [&] { return replaced; }))
        << "listed again without backing off";
  }
  stop.Cancel();
  runner.join();
  EXPECT_EQ(server.CountRequests("GET", "/api/v1/namespaces/ns/pods"), 1u);
}

TEST(K8sBackoffTest, DoublesWithJitterUpToTheMaximum) {
  Backoff::Options o;
  o.initial = 100ms;
  o.max = 1000ms;
  o.jitter = 0;
  Backoff exact(o);
  const std::chrono::milliseconds want[] = {100ms, 200ms, 400ms, 800ms, 1000ms, 1000ms};
  for (auto w : want)
    EXPECT_EQ(exact.Next(), w);
  exact.Reset();
  EXPECT_EQ(exact.Next(), 100ms);

  o.jitter = 0.5;
  Backoff jittered(o);
  bool varied = false;
  std::chrono::milliseconds first = jittered.Next();
  EXPECT_GE(first, 100ms);
  EXPECT_LE(first, 150ms);
  for (int i = 0; i < 50; ++i) {
    jittered.Reset();
    auto d = jittered.Next();
    EXPECT_GE(d, 100ms);
    EXPECT_LE(d, 150ms);
    varied |= d != first;
  }
  EXPECT_TRUE(varied) << "jitter spreads retries";

  // Jitter never takes a delay past the maximum.
  o.initial = o.max = 100ms;
  o.jitter = 1.0;
  Backoff capped(o);
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(capped.Next(), 100ms);
}

}  // namespace
}  // namespace tessera::k8s
