#include "coordinator/web_server.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/benchmark_service.h"
#include "coordinator/campaign_report.h"
#include "coordinator/campaign_service.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "util/status_macros.h"

namespace hilnas {

namespace net = boost::asio;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;

namespace {

constexpr char kPage[] = R"html(<!doctype html>
<html><head><meta charset="utf-8"><title>hilnas coordinator</title>
<style>
body{font-family:sans-serif;margin:20px;color:#222}
h1{font-size:20px;margin:0 0 8px} h2{font-size:16px;margin:18px 0 6px}
table{border-collapse:collapse;font-size:12px} td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}
th{background:#f0f0f0} .bar{width:420px;height:14px;background:#eee;display:inline-block;vertical-align:middle}
.fill{height:14px;background:#1f77b4} .front{background:#fff1e0} #log{font-family:monospace;font-size:12px;white-space:pre-wrap}
.camp{cursor:pointer;margin-right:10px;text-decoration:underline}
</style></head><body>
<h1>hilnas coordinator</h1>
<div id="campaigns">loading campaigns...</div>
<div id="detail"></div>
<h2>Agents</h2><div id="agents">loading agents...</div>
<script>
let selected = new URLSearchParams(location.search).get('campaign');
function esc(s){return String(s).replace(/[&<>]/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;'}[c]));}
function bar(done,total){const p=total>0?Math.min(100,100*done/total):0;
  return `<span class="bar"><div class="fill" style="width:${p}%"></div></span> ${done} / ${total}`;}
async function refresh(){
  try{
    const list=await (await fetch('/api/campaigns')).json();
    if(!selected && list.campaigns && list.campaigns.length) selected=list.campaigns[list.campaigns.length-1].name;
    document.getElementById('campaigns').innerHTML = (list.campaigns||[]).length===0 ? 'no campaigns yet' :
      'Campaigns: '+list.campaigns.map(c=>`<span class="camp" onclick="selected='${c.name}';refresh()">${esc(c.name)} (${c.state})</span>`).join('');
    if(selected){
      const d=await (await fetch('/api/campaigns/'+selected)).json();
      const s=d.status, cfg=s.config||{};
      let h=`<h2 id="campaign-title">Campaign ${esc(s.name)}: ${esc(s.state)}, stage ${s.stage||0}</h2>`;
      h+=`<div>${esc(s.message||'')}</div>`;
      h+=`<div>stage 1 latency points ${bar(s.latencyPoints||0,cfg.stage1LatencyPoints||0)}`+
         ` &nbsp; CV R<sup>2</sup> ${s.cvR2!==undefined?s.cvR2.toFixed(3):'-'}, Kendall tau ${s.cvTau!==undefined?s.cvTau.toFixed(3):'-'}</div>`;
      h+=`<div>stage 2 trials ${bar(s.trialsTotal||0,cfg.stage2Trials||0)} &nbsp; done ${s.trialsDone||0}, failed ${s.trialsFailed||0},`+
         ` front ${s.frontSize||0}, hypervolume ${(s.hypervolume||0).toPrecision(4)}</div>`;
      h+=`<h2>Pareto front</h2><img id="chart" src="/api/campaigns/${selected}/front.svg?t=${Date.now()}">`;
      h+=`<h2>Trials</h2><table id="trials"><tr><th>trial</th><th>stage</th><th>state</th><th>provenance</th><th>architecture</th>`+
         `<th>parameters</th><th>TTFT ms pred</th><th>TTFT ms meas</th><th>loss</th><th>front</th></tr>`;
      for(const t of d.trials){
        h+=`<tr class="${t.on_front?'front':''}"><td>${t.trial}</td><td>${t.stage}</td><td>${t.state}</td><td>${esc(t.provenance)}</td>`+
           `<td style="text-align:left">${esc(t.architecture)}</td><td>${t.parameters}</td>`+
           `<td>${t.predicted_ttft_ms>0?t.predicted_ttft_ms.toFixed(1):'-'}</td><td>${t.measured_ttft_ms>0?t.measured_ttft_ms.toFixed(1):'-'}</td>`+
           `<td>${t.loss>0?t.loss.toFixed(4):'-'}</td><td>${t.on_front?'*':''}</td></tr>`;
      }
      h+=`</table><h2>Progress log</h2><div id="log">${esc((s.log||[]).join('\n'))}</div>`;
      document.getElementById('detail').innerHTML=h;
    }
    const a=await (await fetch('/api/agents')).json();
    document.getElementById('agents').innerHTML = (a.agents||[]).length===0 ? 'no agents registered' :
      '<table id="agent-table"><tr><th>name</th><th>state</th><th>threads</th><th>jobs done</th><th>runtime</th></tr>'+
      a.agents.map(x=>`<tr><td>${esc(x.device.name)}</td><td>${x.state}</td><td>${x.device.threads||0}</td><td>${x.jobsDone||0}</td><td>${esc(x.device.runtime||'')}</td></tr>`).join('')+'</table>';
  }catch(e){document.getElementById('campaigns').innerText='coordinator unreachable: '+e;}
}
refresh(); setInterval(refresh,2000);
</script></body></html>
)html";

std::string ProtoJson(const google::protobuf::Message& m) {
  std::string json;
  google::protobuf::util::MessageToJsonString(m, &json);
  return json;
}

absl::StatusOr<std::string> CampaignJson(CampaignStore& store, const std::string& name) {
  HILNAS_ASSIGN_OR_RETURN(CampaignStatus status, DescribeCampaign(store, name, 40));
  HILNAS_ASSIGN_OR_RETURN(CampaignRecord record, store.Get(name));
  HILNAS_ASSIGN_OR_RETURN(std::vector<Trial> trials, store.Trials(name));
  const FrontView front = ComputeFront(record, trials);
  nlohmann::json j;
  j["status"] = nlohmann::json::parse(ProtoJson(status));
  j["trials"] = nlohmann::json::array();
  for (const Trial& t : trials) {
    bool on_front = false;
    for (size_t i = 0; i < front.evaluated.size(); ++i) {
      on_front = on_front || (front.evaluated[i] == &t && front.on_front[i]);
    }
    j["trials"].push_back({{"trial", t.id()},
                           {"stage", t.stage()},
                           {"state", absl::AsciiStrToLower(TrialState_Name(t.state()))},
                           {"provenance", t.provenance()},
                           {"architecture", ArchSummary(t.arch())},
                           {"parameters", t.parameters()},
                           {"predicted_ttft_ms", t.predicted_ttft_ms()},
                           {"measured_ttft_ms", t.measured_ttft_ms()},
                           {"loss", t.stage() == 2 && t.state() == DONE ? t.loss() : 0.0},
                           {"message", t.message()},
                           {"on_front", on_front}});
  }
  return j.dump();
}

}  // namespace

absl::StatusOr<WebServer::Response> WebServer::Handle(const std::string& target,
                                                      CampaignStore& campaigns, JobStore& jobs) {
  const std::string path = target.substr(0, target.find('?'));
  if (path == "/" || path == "/index.html") return Response{"text/html; charset=utf-8", kPage};
  if (path == "/api/campaigns") {
    HILNAS_ASSIGN_OR_RETURN(std::vector<CampaignRecord> all, campaigns.List());
    ListCampaignsResponse list;
    for (const CampaignRecord& r : all) {
      HILNAS_ASSIGN_OR_RETURN(*list.add_campaigns(),
                              DescribeCampaign(campaigns, r.config.name(), 0));
      list.mutable_campaigns()->rbegin()->clear_config();
    }
    return Response{"application/json", ProtoJson(list)};
  }
  if (path == "/api/agents") {
    HILNAS_ASSIGN_OR_RETURN(ListAgentsResponse list, ListAgentsOf(jobs));
    return Response{"application/json", ProtoJson(list)};
  }
  constexpr absl::string_view kPrefix = "/api/campaigns/";
  if (absl::StartsWith(path, kPrefix)) {
    std::string name(path.substr(kPrefix.size()));
    if (absl::EndsWith(name, "/front.svg")) {
      name.resize(name.size() - std::string("/front.svg").size());
      HILNAS_ASSIGN_OR_RETURN(CampaignRecord record, campaigns.Get(name));
      HILNAS_ASSIGN_OR_RETURN(std::vector<Trial> trials, campaigns.Trials(name));
      return Response{"image/svg+xml", ParetoSvg(record, trials)};
    }
    HILNAS_ASSIGN_OR_RETURN(std::string json, CampaignJson(campaigns, name));
    return Response{"application/json", json};
  }
  return absl::NotFoundError(absl::StrCat("no page at ", path));
}

struct WebServer::Impl {
  Impl(CampaignStore* c, JobStore* j) : campaigns(c), jobs(j), acceptor(ioc) {}
  CampaignStore* campaigns;
  JobStore* jobs;
  net::io_context ioc;
  tcp::acceptor acceptor;
  int port = 0;
  std::atomic<bool> stopping{false};
  absl::Mutex mu;
  int connections ABSL_GUARDED_BY(mu) = 0;  // being served on their own threads
  std::thread thread;

  void Serve(tcp::socket& socket) {
    timeval tv{5, 0};  // a stalled client gives up its thread after 5 s
    setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(socket.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    boost::beast::flat_buffer buffer;
    http::request<http::string_body> req;
    boost::system::error_code ec;
    http::read(socket, buffer, req, ec);
    if (!ec) {
      http::response<http::string_body> res;
      res.version(req.version());
      res.keep_alive(false);
      res.set(http::field::server, "hilnas");
      res.set(http::field::cache_control, "no-store");
      if (req.method() != http::verb::get) {
        res.result(http::status::method_not_allowed);
        res.body() = "GET only\n";
      } else {
        absl::StatusOr<Response> r = Handle(std::string(req.target()), *campaigns, *jobs);
        if (r.ok()) {
          res.result(http::status::ok);
          res.set(http::field::content_type, r->content_type);
          res.body() = std::move(r->body);
        } else {
          res.result(r.status().code() == absl::StatusCode::kNotFound
                         ? http::status::not_found
                         : http::status::internal_server_error);
          res.set(http::field::content_type, "text/plain");
          res.body() = std::string(r.status().message()) + "\n";
        }
      }
      res.prepare_payload();
      http::write(socket, res, ec);
    }
    socket.shutdown(tcp::socket::shutdown_both, ec);
  }

  void Accept() {
    while (!stopping) {
      tcp::socket socket(ioc);
      boost::system::error_code ec;
      acceptor.accept(socket, ec);
      if (stopping) break;
      if (ec) continue;
      {
        absl::MutexLock lock(&mu);
        ++connections;
      }
      // The socket lives on the heap and is destroyed before the count
      // drops: once it is zero ~WebServer may free the io_context every
      // socket refers to (TSan saw a moved-from socket captured by value
      // outlive it).
      auto owned = std::make_unique<tcp::socket>(std::move(socket));
      std::thread([this, owned = std::move(owned)]() mutable {
        Serve(*owned);
        owned.reset();
        absl::MutexLock lock(&mu);
        --connections;
      }).detach();
    }
  }
};

absl::StatusOr<std::unique_ptr<WebServer>> WebServer::Start(const std::string& address,
                                                            CampaignStore* campaigns,
                                                            JobStore* jobs) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(absl::StrCat("--http ", address, " is not HOST:PORT"));
  }
  auto impl = std::make_unique<Impl>(campaigns, jobs);
  boost::system::error_code ec;
  const auto ip = net::ip::make_address(address.substr(0, colon), ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("--http ", address, ": ", ec.message()));
  const tcp::endpoint endpoint(ip, static_cast<unsigned short>(port));
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("web page: cannot listen on ", address, ": ", ec.message()));
  }
  impl->port = impl->acceptor.local_endpoint().port();
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->Accept(); });
  return std::unique_ptr<WebServer>(new WebServer(std::move(impl)));
}

WebServer::WebServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

WebServer::~WebServer() {
  impl_->stopping = true;
  {  // wake the blocking accept with a connection of our own
    boost::system::error_code ec;
    tcp::socket poke(impl_->ioc);
    tcp::endpoint self = impl_->acceptor.local_endpoint(ec);
    if (self.address().is_unspecified()) self.address(net::ip::make_address("127.0.0.1"));
    poke.connect(self, ec);
  }
  impl_->thread.join();
  Impl* impl = impl_.get();
  absl::MutexLock lock(&impl->mu);
  auto idle = [impl]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(impl->mu) { return impl->connections == 0; };
  impl->mu.Await(absl::Condition(&idle));
}

int WebServer::port() const { return impl_->port; }

}  // namespace hilnas
