// The coordinator's web page in a real browser: a coordinator process serves
// a campaign database with --http; Debian's headless Chromium loads the
// page, runs its JavaScript against the JSON API, and we check the rendered
// DOM (progress, trial table, Pareto chart, agents) and take a screenshot.
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "coordinator/campaign_store.h"
#include "coordinator/job_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/process.h"
#include "util/status_matchers.h"
#include "util/subprocess.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

namespace fs = std::filesystem;
using ::hilnas::testing::Process;
using ::hilnas::testing::WaitFor;
using ::testing::HasSubstr;

TEST(WebTest, ChromiumRendersProgressTrialsChartAndAgents) {
  const std::string dir = ::testing::TempDir() + "/hilnas_web_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string db = dir + "/c.db";
  {
    SystemClock clock;
    auto jobs = JobStore::Open(db, &clock);
    auto campaigns = CampaignStore::Open(db, &clock);
    ASSERT_TRUE(jobs.ok() && campaigns.ok());
    CampaignConfig c;
    c.set_name("webdemo");
    c.set_stage2_trials(8);
    c.set_stage1_latency_points(10);
    c.mutable_reference()->set_loss(3);
    c.mutable_reference()->set_ttft_ms(100);
    ASSERT_OK((*campaigns)->Create(c));
    CampaignRecord r = *(*campaigns)->Get("webdemo");
    r.stage = 2;
    r.cv_r2 = 0.93;
    r.cv_tau = 0.81;
    r.reference = c.reference();
    ASSERT_OK((*campaigns)->Update(r));
    std::vector<Trial> trials;
    for (int i = 0; i < 5; ++i) {
      Trial& t = trials.emplace_back();
      t.set_stage(2);
      t.set_state(DONE);
      t.mutable_arch()->set_num_layers(2 + i);
      t.mutable_arch()->set_d_model(128);
      t.set_loss(2.6 - 0.1 * i + (i == 2 ? 0.3 : 0));
      t.set_predicted_ttft_ms(10 + 15 * i);
      t.set_provenance(i < 3 ? "sobol" : "qnehvi");
    }
    ASSERT_OK((*campaigns)->AddTrials("webdemo", trials).status());
    ASSERT_OK((*campaigns)->Log("webdemo", "stage 2: proposed 2 by qnehvi"));
    DeviceIdentity d;
    d.set_name("pixel-8");
    d.set_threads(4);
    ASSERT_OK((*jobs)->RegisterAgent(d).status());
  }
  Process coordinator(
      {"coordinator", "--listen=127.0.0.1:0", "--db=" + db, "--port_file=" + dir + "/port",
       "--http=127.0.0.1:0", "--http_port_file=" + dir + "/http_port"},
      dir + "/coordinator.log");
  std::string port;
  ASSERT_TRUE(WaitFor(
      [&] { return ReadFileToString(dir + "/http_port", &port).ok() && !port.empty(); }, 60))
      << coordinator.Log();
  while (!port.empty() && port.back() == '\n') port.pop_back();
  const std::string url = "http://127.0.0.1:" + port + "/?campaign=webdemo";
  const std::string chromium =
      "chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
      "--virtual-time-budget=8000 --user-data-dir=" +
      dir + "/profile ";
  auto dom = RunCapturing(chromium + "--dump-dom '" + url + "'", 120);
  ASSERT_TRUE(dom.ok()) << dom.status() << " (scripts/setup installs Debian's chromium)";
  const std::string& html = dom->out;
  EXPECT_THAT(html, HasSubstr("Campaign webdemo: created, stage 2"));
  EXPECT_THAT(html, HasSubstr("0.930"));                 // CV R^2
  EXPECT_THAT(html, HasSubstr("5 / 8"));                 // stage-2 progress bar
  EXPECT_THAT(html, HasSubstr("front.svg"));             // the live chart
  EXPECT_THAT(html, HasSubstr("proposed 2 by qnehvi"));  // the progress log
  EXPECT_THAT(html, HasSubstr("pixel-8"));               // the agents table
  int rows = 0;
  for (size_t at = 0; (at = html.find("L2 d128", at)) != std::string::npos; ++at) ++rows;
  EXPECT_EQ(rows, 1);
  EXPECT_THAT(html, HasSubstr("L6 d128"));
  const std::string png = dir + "/web.png";
  auto shot = RunCapturing(
      chromium + "--window-size=1100,1300 --screenshot=" + png + " '" + url + "'", 120);
  ASSERT_TRUE(shot.ok()) << shot.status();
  ASSERT_TRUE(fs::exists(png));
  EXPECT_GT(fs::file_size(png), 20000u) << "a blank page would be far smaller";
  std::fprintf(stderr, "screenshot: %s\n", png.c_str());
}

}  // namespace
}  // namespace hilnas
