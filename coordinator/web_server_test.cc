#include "coordinator/web_server.h"

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <chrono>
#include <filesystem>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

using ::hilnas::testing::StatusIs;
using ::testing::HasSubstr;

class WebServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One file per test: ctest runs the tests of this file in parallel.
    const std::string db = ::testing::TempDir() + "/" +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".db";
    std::filesystem::remove(db);
    jobs_ = *JobStore::Open(db, &clock_);
    campaigns_ = *CampaignStore::Open(db, &clock_);
    CampaignConfig c;
    c.set_name("web");
    c.mutable_reference()->set_loss(3);
    c.mutable_reference()->set_ttft_ms(100);
    ASSERT_OK(campaigns_->Create(c));
    CampaignRecord r = *campaigns_->Get("web");
    r.stage = 2;
    ASSERT_OK(campaigns_->Update(r));
    std::vector<Trial> trials;
    for (int i = 0; i < 4; ++i) {
      Trial& t = trials.emplace_back();
      t.set_stage(2);
      t.set_state(DONE);
      if (i == 3) {  // one on a cluster node
        t.set_state(TRAINING);
        t.set_eval_attempt(2);
        t.set_eval_job("4121");
        t.set_eval_state("RUNNING");
        t.set_eval_node("gpu03");
      }
      t.mutable_arch()->set_num_layers(2 + i);
      t.set_loss(2.5 - 0.2 * i);
      t.set_predicted_ttft_ms(10 + 20 * i);
      t.set_provenance("sobol");
    }
    ASSERT_OK(campaigns_->AddTrials("web", trials).status());
    DeviceIdentity d;
    d.set_name("phone-1");
    ASSERT_OK(jobs_->RegisterAgent(d).status());
  }

  SystemClock clock_;
  std::unique_ptr<JobStore> jobs_;
  std::unique_ptr<CampaignStore> campaigns_;
};

TEST_F(WebServerTest, ServesThePageAndTheJsonApi) {
  ASSERT_OK_AND_ASSIGN(auto page, WebServer::Handle("/", *campaigns_, *jobs_));
  EXPECT_THAT(page.content_type, HasSubstr("text/html"));
  EXPECT_THAT(page.body, HasSubstr("hilnas coordinator"));
  ASSERT_OK_AND_ASSIGN(auto list, WebServer::Handle("/api/campaigns", *campaigns_, *jobs_));
  auto j = nlohmann::json::parse(list.body);
  EXPECT_EQ(j["campaigns"][0]["name"], "web");
  EXPECT_EQ(j["campaigns"][0]["frontSize"], 3);
  ASSERT_OK_AND_ASSIGN(auto one, WebServer::Handle("/api/campaigns/web?x=1", *campaigns_, *jobs_));
  j = nlohmann::json::parse(one.body);
  EXPECT_EQ(j["trials"].size(), 4u);
  EXPECT_EQ(j["trials"][2]["on_front"], true);
  EXPECT_EQ(j["trials"][3]["evaluation"], "4121 RUNNING on gpu03");
  EXPECT_EQ(j["status"]["inFlight"][0], "trial 4 attempt 2: 4121 RUNNING on gpu03");
  ASSERT_OK_AND_ASSIGN(auto svg,
                       WebServer::Handle("/api/campaigns/web/front.svg", *campaigns_, *jobs_));
  EXPECT_EQ(svg.content_type, "image/svg+xml");
  EXPECT_THAT(svg.body, HasSubstr("Pareto front"));
  ASSERT_OK_AND_ASSIGN(auto agents, WebServer::Handle("/api/agents", *campaigns_, *jobs_));
  EXPECT_THAT(agents.body, HasSubstr("phone-1"));
  // The agent's drift: its newest canary reading with the coordinator's
  // ratios, drawn by the page's drift() column.
  ASSERT_OK_AND_ASSIGN(std::vector<AgentRecord> registered, jobs_->ListAgents());
  BenchmarkRequest job;
  job.set_checkpoint_dir("/ckpt");
  job.add_prompt_lengths(256);
  ASSERT_OK_AND_ASSIGN(int64_t job_id, jobs_->SubmitJob(job, "", ""));
  ASSERT_OK_AND_ASSIGN(std::optional<Lease> lease, jobs_->LeaseJob(registered[0].agent_id));
  ASSERT_TRUE(lease.has_value());
  BenchmarkResult result;
  result.mutable_canary()->set_ttft_ms(50);
  result.mutable_canary()->set_decode_ms_per_token(0.5);
  result.mutable_canary()->set_measured_unix_ms(1000);
  ASSERT_OK(jobs_->ReportResult(registered[0].agent_id, job_id, lease->lease_id, result).status());
  ASSERT_OK_AND_ASSIGN(agents, WebServer::Handle("/api/agents", *campaigns_, *jobs_));
  j = nlohmann::json::parse(agents.body);
  EXPECT_EQ(j["agents"][0]["canaries"], 1);
  EXPECT_EQ(j["agents"][0]["lastCanary"]["ttftRatio"], 1.0);
  EXPECT_EQ(j["agents"][0]["lastCanary"]["baselineTtftMs"], 50.0);
  EXPECT_THAT(page.body, HasSubstr("<td>${drift(x)}</td>"));
  EXPECT_THAT(WebServer::Handle("/api/campaigns/nope", *campaigns_, *jobs_),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope")));
  EXPECT_THAT(WebServer::Handle("/etc/passwd", *campaigns_, *jobs_),
              StatusIs(absl::StatusCode::kNotFound, ::testing::_));
}

TEST_F(WebServerTest, AnswersOverHttpWhileAStalledClientWaits) {
  ASSERT_OK_AND_ASSIGN(auto server, WebServer::Start("127.0.0.1:0", campaigns_.get(), jobs_.get()));
  namespace net = boost::asio;
  namespace http = boost::beast::http;
  net::io_context ioc;
  net::ip::tcp::endpoint ep(net::ip::make_address("127.0.0.1"), server->port());
  net::ip::tcp::socket stalled(ioc);  // connects and says nothing
  stalled.connect(ep);
  net::ip::tcp::socket s(ioc);
  s.connect(ep);
  http::request<http::empty_body> req(http::verb::get, "/api/campaigns/web", 11);
  req.set(http::field::host, "localhost");
  http::write(s, req);
  boost::beast::flat_buffer buf;
  http::response<http::string_body> res;
  http::read(s, buf, res);
  EXPECT_EQ(res.result(), http::status::ok);
  EXPECT_THAT(res.body(), HasSubstr("\"trials\""));
  stalled.close();
}

TEST_F(WebServerTest, ASlowOrHalfSentRequestIsDroppedAtTheDeadline) {
  WebServerOptions o;
  o.address = "127.0.0.1:0";
  o.request_deadline_ms = 300;
  ASSERT_OK_AND_ASSIGN(auto server, WebServer::Start(o, campaigns_.get(), jobs_.get()));
  namespace net = boost::asio;
  net::io_context ioc;
  net::ip::tcp::socket s(ioc);
  s.connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), server->port()));
  // Trickle a request that never ends: a byte every 50 ms keeps the
  // connection busy, but not past the one deadline of the whole request.
  const std::string head = "GET /api/campaigns HTTP/1.1\r\nHost: x\r\nX-Slow: ";
  net::write(s, net::buffer(head));
  const auto t0 = std::chrono::steady_clock::now();
  boost::system::error_code ec;
  for (int i = 0; i < 200 && !ec; ++i) {  // at most 10 s
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    net::write(s, net::buffer("a", 1), ec);
  }
  EXPECT_TRUE(ec) << "the server kept a trickling request open for 10 s";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST_F(WebServerTest, WithUserTokensEveryRouteNeedsOneAndThePageStaysReadOnly) {
  WebServerOptions o;
  o.address = "127.0.0.1:0";
  o.user_tokens = {{"alice", "alice-token-0123456789"}};
  ASSERT_OK_AND_ASSIGN(auto server, WebServer::Start(o, campaigns_.get(), jobs_.get()));
  namespace net = boost::asio;
  namespace http = boost::beast::http;
  auto get = [&](http::verb verb, const std::string& target, const std::string& auth) {
    net::io_context ioc;
    net::ip::tcp::socket s(ioc);
    s.connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), server->port()));
    http::request<http::string_body> req(verb, target, 11);
    req.set(http::field::host, "localhost");
    if (!auth.empty()) req.set(http::field::authorization, auth);
    req.prepare_payload();
    http::write(s, req);
    boost::beast::flat_buffer buf;
    http::response<http::string_body> res;
    http::read(s, buf, res);
    return res.result_int();
  };
  for (const char* target : {"/", "/api/campaigns", "/api/campaigns/web", "/api/agents", "/x"}) {
    EXPECT_EQ(get(http::verb::get, target, ""), 401u) << target;
    EXPECT_EQ(get(http::verb::get, target, "Bearer wrong"), 401u) << target;
  }
  EXPECT_EQ(get(http::verb::get, "/api/campaigns/web", "Bearer alice-token-0123456789"), 200u);
  EXPECT_EQ(get(http::verb::delete_, "/api/campaigns/web", "Bearer alice-token-0123456789"), 405u);
  EXPECT_EQ(get(http::verb::get, "/login", ""), 200u);
}

// Login cookies are signed with the user's token (issue 39): a restarted
// server still accepts them, a changed token or an edited cookie does not,
// and they expire after 12 hours.
TEST_F(WebServerTest, LoginCookiesOutliveARestartAndDieWithTheToken) {
  namespace net = boost::asio;
  namespace http = boost::beast::http;
  ManualClock clock(1'000'000);
  WebServerOptions o;
  o.address = "127.0.0.1:0";
  o.user_tokens = {{"bob", "bob-token-0123456789"}, {"alice", "alice-token-0123456789"}};
  o.clock = &clock;
  auto server = WebServer::Start(o, campaigns_.get(), jobs_.get()).value();
  auto call = [&](http::verb verb, const std::string& target, const std::string& cookie,
                  const std::string& body = "") {
    net::io_context ioc;
    net::ip::tcp::socket s(ioc);
    s.connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), server->port()));
    http::request<http::string_body> req(verb, target, 11);
    req.set(http::field::host, "localhost");
    if (!cookie.empty()) req.set(http::field::cookie, cookie);
    if (!body.empty()) req.set(http::field::content_type, "application/x-www-form-urlencoded");
    req.body() = body;
    req.prepare_payload();
    http::write(s, req);
    boost::beast::flat_buffer buf;
    http::response<http::string_body> res;
    http::read(s, buf, res);
    return res;
  };
  EXPECT_EQ(call(http::verb::post, "/login", "", "token=wrong").result_int(), 401u);
  const auto login = call(http::verb::post, "/login", "", "token=alice-token-0123456789");
  ASSERT_EQ(login.result_int(), 303u);
  const std::string set_cookie(login[http::field::set_cookie]);
  ASSERT_THAT(set_cookie, HasSubstr("HttpOnly"));
  EXPECT_THAT(set_cookie, ::testing::Not(HasSubstr("alice-token")));
  const std::string cookie = set_cookie.substr(0, set_cookie.find(';'));
  EXPECT_EQ(call(http::verb::get, "/api/campaigns", cookie).result_int(), 200u);

  server.reset();  // a restart: nothing of the session was kept in memory
  server = WebServer::Start(o, campaigns_.get(), jobs_.get()).value();
  EXPECT_EQ(call(http::verb::get, "/api/campaigns", cookie).result_int(), 200u);
  // Edited: another expiry, or the other user's name, with the same MAC.
  const std::vector<std::string> parts = absl::StrSplit(cookie, '.');
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(
      call(http::verb::get, "/api/campaigns", absl::StrCat(parts[0], ".99999999999999.", parts[2]))
          .result_int(),
      401u);
  EXPECT_EQ(call(http::verb::get, "/api/campaigns",
                 absl::StrCat("hilnas_session=", absl::BytesToHexString("bob"), ".", parts[1], ".",
                              parts[2]))
                .result_int(),
            401u);
  clock.AdvanceMs(12 * 3600 * 1000 - 1);
  EXPECT_EQ(call(http::verb::get, "/api/campaigns", cookie).result_int(), 200u);
  clock.AdvanceMs(2);
  EXPECT_EQ(call(http::verb::get, "/api/campaigns", cookie).result_int(), 401u);
  // A new token for alice ends her cookies at once.
  const std::string fresh = [&] {
    const auto res = call(http::verb::post, "/login", "", "token=alice-token-0123456789");
    const std::string c(res[http::field::set_cookie]);
    return c.substr(0, c.find(';'));
  }();
  EXPECT_EQ(call(http::verb::get, "/api/campaigns", fresh).result_int(), 200u);
  server.reset();
  o.user_tokens = {{"alice", "alice-new-token-0123456789"}};
  server = WebServer::Start(o, campaigns_.get(), jobs_.get()).value();
  EXPECT_EQ(call(http::verb::get, "/api/campaigns", fresh).result_int(), 401u);
}

}  // namespace
}  // namespace hilnas
