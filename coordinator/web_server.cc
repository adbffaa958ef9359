#include "coordinator/web_server.h"

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast.hpp>
#include <boost/beast/ssl.hpp>
#include <map>
#include <optional>
#include <thread>
#include <type_traits>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
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
#include "util/grpc_security.h"
#include "util/secrets.h"
#include "util/status_macros.h"

namespace hilnas {

namespace net = boost::asio;
namespace http = boost::beast::http;
namespace ssl = boost::asio::ssl;
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
// The newest canary against the agent's fastest, e.g. "1.03x / 1.01x (12 readings)".
function drift(x){const c=x.lastCanary; if(!x.canaries||!c) return '-';
  const t=`${(c.ttftRatio||0).toFixed(2)}x / ${(c.decodeRatio||0).toFixed(2)}x (${x.canaries} readings)`;
  return c.drifted?`<b class="drift">${t} DRIFT</b>`:t;}
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
      h+=`<div id="deployment">${esc(s.deployment||'')}</div>`;
      h+=`<div>stage 1 latency points ${bar(s.latencyPoints||0,cfg.stage1LatencyPoints||0)}`+
         ` &nbsp; CV R<sup>2</sup> ${s.cvR2!==undefined?s.cvR2.toFixed(3):'-'}, Kendall tau ${s.cvTau!==undefined?s.cvTau.toFixed(3):'-'}</div>`;
      h+=`<div>stage 2 trials ${bar(s.trialsTotal||0,cfg.stage2Trials||0)} &nbsp; done ${s.trialsDone||0}, failed ${s.trialsFailed||0},`+
         ` front ${s.frontSize||0}, hypervolume ${(s.hypervolume||0).toPrecision(4)}</div>`;
      if((s.inFlight||[]).length) h+=`<div id="in-flight">evaluating: ${(s.inFlight).map(esc).join('; ')}</div>`;
      h+=`<h2>Pareto front</h2><img id="chart" src="/api/campaigns/${selected}/front.svg?t=${Date.now()}">`;
      const tasks=d.task_columns||[];
      h+=`<h2>Trials</h2><table id="trials"><tr><th>trial</th><th>stage</th><th>state</th><th>provenance</th><th>architecture</th>`+
         `<th>parameters</th><th>TTFT ms pred</th><th>TTFT ms meas</th><th>loss</th>`+
         tasks.map(k=>`<th>${esc(k.replace('/',' '))}</th>`).join('')+`<th>front</th></tr>`;
      for(const t of d.trials){
        const sc=t.tasks||{};
        h+=`<tr class="${t.on_front?'front':''}"><td>${t.trial}</td><td>${t.stage}</td><td>${t.state}${t.evaluation?' ('+esc(t.evaluation.trim())+')':''}</td><td>${esc(t.provenance)}</td>`+
           `<td style="text-align:left">${esc(t.architecture)}</td><td>${t.parameters}</td>`+
           `<td>${t.predicted_ttft_ms>0?t.predicted_ttft_ms.toFixed(1):'-'}</td><td>${t.measured_ttft_ms>0?t.measured_ttft_ms.toFixed(1):'-'}</td>`+
           `<td>${t.loss>0?t.loss.toFixed(4):'-'}</td>`+
           tasks.map(k=>`<td>${sc[k]?sc[k].value.toFixed(3)+' &plusmn; '+sc[k].stderr.toFixed(3):'-'}</td>`).join('')+
           `<td>${t.on_front?'*':''}</td></tr>`;
      }
      h+=`</table><h2>Progress log</h2><div id="log">${esc((s.log||[]).join('\n'))}</div>`;
      document.getElementById('detail').innerHTML=h;
    }
    const a=await (await fetch('/api/agents')).json();
    document.getElementById('agents').innerHTML = (a.agents||[]).length===0 ? 'no agents registered' :
      '<table id="agent-table"><tr><th>name</th><th>state</th><th>threads</th><th>jobs done</th><th>drift (canary TTFT / decode vs baseline)</th><th>runtime</th></tr>'+
      a.agents.map(x=>`<tr><td>${esc(x.device.name)}</td><td>${x.state}</td><td>${x.device.threads||0}</td><td>${x.jobsDone||0}</td><td>${drift(x)}</td><td>${esc(x.device.runtime||'')}</td></tr>`).join('')+'</table>';
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
  j["task_columns"] = nlohmann::json::array();
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
                           {"evaluation", t.state() == TRAINING ? EvaluationSummary(t) : ""},
                           {"on_front", on_front}});
    // Task scores by "task/metric" (CampaignConfig.tasks, pareto report).
    nlohmann::json scores = nlohmann::json::object();
    for (const TaskScore& s : t.task_scores()) {
      const std::string key = absl::StrCat(s.task(), "/", s.metric());
      scores[key] = {{"value", s.value()}, {"stderr", s.std_err()}, {"n", s.n()}};
      auto& cols = j["task_columns"];
      if (std::find(cols.begin(), cols.end(), key) == cols.end()) cols.push_back(key);
    }
    if (!scores.empty()) j["trials"].back()["tasks"] = std::move(scores);
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

namespace {

constexpr char kLoginPage[] = R"html(<!doctype html>
<html><head><meta charset="utf-8"><title>hilnas coordinator: log in</title></head>
<body style="font-family:sans-serif;margin:40px">
<h1 style="font-size:20px">hilnas coordinator</h1>
<p>This coordinator needs a user token (the one given to <code>hilnas coordinator --user-token</code>).</p>
<form method="post" action="/login"><input type="password" name="token" size="48" autofocus>
<button type="submit">Log in</button></form></body></html>
)html";

constexpr char kCookie[] = "hilnas_session";
constexpr int64_t kWebSessionMs = 12 * 3600 * 1000;

// A login cookie (issue 39): the user's name in hex, its expiry in Unix ms,
// and an HMAC-SHA256 of both under that user's own token. The coordinator
// keeps nothing in memory, so a restart logs no one out; a changed or
// removed token ends that user's cookies at once. The cookie carries no
// secret: the MAC reveals nothing of the token.
std::string SessionMac(const UserToken& u, absl::string_view name_hex, int64_t expiry_ms) {
  return HmacSha256Hex(u.token, absl::StrCat("hilnas web session|", name_hex, "|", expiry_ms));
}

std::string SignedSession(const UserToken& u, int64_t expiry_ms) {
  const std::string name_hex = absl::BytesToHexString(u.name);
  return absl::StrCat(name_hex, ".", expiry_ms, ".", SessionMac(u, name_hex, expiry_ms));
}

// The user a cookie names, if its MAC checks under that user's token and it
// has not expired.
std::optional<std::string> UserOfCookie(const std::vector<UserToken>& users,
                                        absl::string_view cookie, int64_t now_ms) {
  const std::vector<absl::string_view> parts = absl::StrSplit(cookie, '.');
  int64_t expiry = 0;
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[1], &expiry) || expiry <= now_ms) {
    return std::nullopt;
  }
  for (const UserToken& u : users) {
    if (absl::BytesToHexString(u.name) != parts[0]) continue;
    if (SecretEquals(SessionMac(u, parts[0], expiry), parts[2])) return u.name;
  }
  return std::nullopt;
}

// The value of `name` in a Cookie header, or empty.
std::string CookieValue(absl::string_view header, absl::string_view name) {
  for (absl::string_view part : absl::StrSplit(header, ';')) {
    part = absl::StripAsciiWhitespace(part);
    if (absl::StartsWith(part, name) && part.size() > name.size() && part[name.size()] == '=') {
      return std::string(part.substr(name.size() + 1));
    }
  }
  return "";
}

// Decodes one application/x-www-form-urlencoded field.
std::string FormField(absl::string_view body, absl::string_view name) {
  for (absl::string_view part : absl::StrSplit(body, '&')) {
    if (!absl::StartsWith(part, name) || part.size() <= name.size() || part[name.size()] != '=') {
      continue;
    }
    std::string out;
    absl::string_view v = part.substr(name.size() + 1);
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i] == '+') {
        out += ' ';
      } else if (v[i] == '%' && i + 2 < v.size()) {
        int byte = 0;
        if (absl::SimpleHexAtoi(v.substr(i + 1, 2), &byte)) {
          out += static_cast<char>(byte);
          i += 2;
        } else {
          out += v[i];
        }
      } else {
        out += v[i];
      }
    }
    return out;
  }
  return "";
}

}  // namespace

struct WebServer::Impl {
  Impl(WebServerOptions o, CampaignStore* c, JobStore* j, const Clock* clk)
      : options(std::move(o)),
        campaigns(c),
        jobs(j),
        clock(clk),
        ssl_ctx(ssl::context::tls_server),
        acceptor(ioc) {}
  const WebServerOptions options;
  CampaignStore* campaigns;
  JobStore* jobs;
  const Clock* clock;
  bool tls = false;
  // Sessions count themselves here from their destructors, which run when
  // the io_context is destroyed: declared before it, so it outlives them.
  std::atomic<int> open_connections{0};
  // Declared before the io_context: sessions (owned by its pending
  // handlers) use the SSL context until the io_context is destroyed.
  ssl::context ssl_ctx;
  net::io_context ioc;
  tcp::acceptor acceptor;
  int port = 0;
  std::thread thread;

  // The credential a request carries (bearer header or login cookie), or
  // UNAUTHENTICATED. Without user tokens every request is "anonymous".
  absl::StatusOr<std::string> UserOfRequest(const http::request<http::string_body>& req) {
    if (options.user_tokens.empty()) return std::string("anonymous");
    const std::string auth(req[http::field::authorization]);
    if (absl::StartsWith(auth, "Bearer ")) return UserOf(options.user_tokens, auth.substr(7));
    const std::string cookie = CookieValue(std::string(req[http::field::cookie]), kCookie);
    if (!cookie.empty()) {
      if (std::optional<std::string> who =
              UserOfCookie(options.user_tokens, cookie, clock->NowMs())) {
        return *who;
      }
    }
    return absl::UnauthenticatedError("user token required");
  }

  std::string NewWebSession(const std::string& who) {
    for (const UserToken& u : options.user_tokens) {
      if (u.name == who) return SignedSession(u, clock->NowMs() + kWebSessionMs);
    }
    return "";  // unreachable: `who` is the name UserOf found
  }

  http::response<http::string_body> Respond(const http::request<http::string_body>& req) {
    http::response<http::string_body> res;
    res.version(req.version());
    res.keep_alive(false);
    res.set(http::field::server, "hilnas");
    res.set(http::field::cache_control, "no-store");
    res.set("X-Content-Type-Options", "nosniff");
    res.set("X-Frame-Options", "DENY");
    auto text = [&](http::status status, const std::string& body) {
      res.result(status);
      res.set(http::field::content_type, "text/plain; charset=utf-8");
      res.body() = body;
    };
    const std::string target(req.target());
    const std::string path = target.substr(0, target.find('?'));
    if (path == "/login") {
      if (options.user_tokens.empty()) {
        res.result(http::status::see_other);
        res.set(http::field::location, "/");
        return res;
      }
      if (req.method() == http::verb::post) {
        absl::StatusOr<std::string> who =
            UserOf(options.user_tokens, FormField(req.body(), "token"));
        if (!who.ok()) {
          res.result(http::status::unauthorized);
          res.set(http::field::content_type, "text/html; charset=utf-8");
          res.body() = kLoginPage;
          return res;
        }
        res.result(http::status::see_other);
        res.set(http::field::location, "/");
        res.set(http::field::set_cookie,
                absl::StrCat(kCookie, "=", NewWebSession(*who),
                             "; Path=/; HttpOnly; SameSite=Strict", tls ? "; Secure" : ""));
        return res;
      }
      res.result(http::status::ok);
      res.set(http::field::content_type, "text/html; charset=utf-8");
      res.body() = kLoginPage;
      return res;
    }
    if (!UserOfRequest(req).ok()) {
      res.result(http::status::unauthorized);
      res.set(http::field::www_authenticate, "Bearer realm=\"hilnas\"");
      if (path == "/" || path == "/index.html") {
        res.set(http::field::content_type, "text/html; charset=utf-8");
        res.body() = kLoginPage;
      } else {
        text(http::status::unauthorized,
             "401: a user token is required (header \"Authorization: Bearer TOKEN\", or log in "
             "at /login)\n");
      }
      return res;
    }
    // Read-only: nothing but GET changes or reads state here.
    if (req.method() != http::verb::get) {
      text(http::status::method_not_allowed, "GET only\n");
      return res;
    }
    absl::StatusOr<Response> r = Handle(target, *campaigns, *jobs);
    if (r.ok()) {
      res.result(http::status::ok);
      res.set(http::field::content_type, r->content_type);
      res.body() = std::move(r->body);
    } else {
      text(r.status().code() == absl::StatusCode::kNotFound ? http::status::not_found
                                                            : http::status::internal_server_error,
           std::string(r.status().message()) + "\n");
    }
    return res;
  }

  void Accept();
};

namespace {

// One connection: (TLS handshake,) read one request, answer, close. The
// whole exchange has one deadline, so a client that trickles bytes or
// stops half-way is dropped when it passes (not only when it goes quiet).
template <typename Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
 public:
  template <typename... Args>
  Session(WebServer::Impl* server, Args&&... args)
      : server_(server), stream_(std::forward<Args>(args)...) {
    ++server_->open_connections;
  }
  ~Session() { --server_->open_connections; }

  void Run() {
    boost::beast::get_lowest_layer(stream_).expires_after(
        std::chrono::milliseconds(server_->options.request_deadline_ms));
    if constexpr (std::is_same_v<Stream, boost::beast::tcp_stream>) {
      Read();
    } else {
      stream_.async_handshake(ssl::stream_base::server,
                              [self = this->shared_from_this()](boost::system::error_code ec) {
                                if (!ec) self->Read();
                              });
    }
  }

 private:
  void Read() {
    parser_.body_limit(16 * 1024);  // a login form; nothing else has a body
    parser_.header_limit(16 * 1024);
    http::async_read(stream_, buffer_, parser_,
                     [self = this->shared_from_this()](boost::system::error_code ec, size_t) {
                       if (!ec) self->Answer();
                     });
  }

  void Answer() {
    response_ = server_->Respond(parser_.get());
    response_.prepare_payload();
    http::async_write(
        stream_, response_,
        [self = this->shared_from_this()](boost::system::error_code, size_t) { self->Close(); });
  }

  void Close() {
    boost::system::error_code ec;
    boost::beast::get_lowest_layer(stream_).socket().shutdown(tcp::socket::shutdown_both, ec);
  }

  WebServer::Impl* server_;
  Stream stream_;
  boost::beast::flat_buffer buffer_;
  http::request_parser<http::string_body> parser_;
  http::response<http::string_body> response_;
};

}  // namespace

void WebServer::Impl::Accept() {
  acceptor.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted) return;
    if (!ec && open_connections.load() < options.max_connections) {
      if (tls) {
        std::make_shared<Session<boost::beast::ssl_stream<boost::beast::tcp_stream>>>(
            this, std::move(socket), ssl_ctx)
            ->Run();
      } else {
        std::make_shared<Session<boost::beast::tcp_stream>>(this, std::move(socket))->Run();
      }
    }
    Accept();
  });
}

absl::StatusOr<std::unique_ptr<WebServer>> WebServer::Start(const std::string& address,
                                                            CampaignStore* campaigns,
                                                            JobStore* jobs) {
  WebServerOptions o;
  o.address = address;
  return Start(o, campaigns, jobs);
}

absl::StatusOr<std::unique_ptr<WebServer>> WebServer::Start(const WebServerOptions& options,
                                                            CampaignStore* campaigns,
                                                            JobStore* jobs) {
  static const SystemClock kSystemClock;
  const std::string& address = options.address;
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--http ", address, " is not HOST:PORT"));
  }
  auto impl = std::make_unique<Impl>(options, campaigns, jobs,
                                     options.clock != nullptr ? options.clock : &kSystemClock);
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("web page: --tls-cert and --tls-key go together");
  }
  if (!options.tls_cert_file.empty()) {
    HILNAS_RETURN_IF_ERROR(ReadPemFile(options.tls_cert_file, "--tls-cert").status());
    HILNAS_RETURN_IF_ERROR(ReadPemFile(options.tls_key_file, "--tls-key").status());
    boost::system::error_code ec;
    impl->ssl_ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                              ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                              ssl::context::no_tlsv1_1);
    impl->ssl_ctx.use_certificate_chain_file(options.tls_cert_file, ec);
    if (!ec) impl->ssl_ctx.use_private_key_file(options.tls_key_file, ssl::context::pem, ec);
    if (ec) {
      return absl::InvalidArgumentError(absl::StrCat("web page: TLS certificate ",
                                                     options.tls_cert_file, " / key ",
                                                     options.tls_key_file, ": ", ec.message()));
    }
    impl->tls = true;
  }
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
  impl->Accept();
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->ioc.run(); });
  return std::unique_ptr<WebServer>(new WebServer(std::move(impl)));
}

WebServer::WebServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

WebServer::~WebServer() {
  impl_->ioc.stop();
  impl_->thread.join();
  // Open sessions are owned by the io_context's pending handlers and are
  // destroyed with it, before the SSL context (Impl's member order).
}

int WebServer::port() const { return impl_->port; }
bool WebServer::tls() const { return impl_->tls; }

}  // namespace hilnas
