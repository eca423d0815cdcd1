// The CLI's capture commands (capture, captures, stacks) in-process against a scripted fake of
// the collector's capture API: the request body, progress lines as rank states change, the
// exit codes (0 complete, 3 partial, 5 failed / timeout, 1 API error, 2 usage), --out with and
// without gzip, the bearer token, the captures table and the stacks view.
#include "tools/cli/capture_cmd.h"

#include <atomic>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

#include <boost/asio.hpp>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/tools/cli_run.h"
#include "tools/cli/cli.h"

using nlohmann::json;
using namespace trainscope::cli;
namespace asio = boost::asio;

namespace {

struct Request {
  std::string method;
  std::string target;
  std::string body;
  std::string authorization;
  std::string acceptEncoding;
};

struct Reply {
  int status = 200;
  std::string body;
  std::string contentEncoding;
};

// One request per connection (the CLI sends Connection: close), answered by `handler` on a
// server thread. Every request is recorded.
class FakeApi {
 public:
  explicit FakeApi(std::function<Reply(const Request&)> handler)
      : handler_(std::move(handler)),
        acceptor_(ioc_, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeApi() {
    stop_ = true;
    boost::system::error_code ec;
    asio::ip::tcp::socket s(ioc_);
    s.connect(acceptor_.local_endpoint(), ec);  // wakes accept()
    thread_.join();
  }
  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
  }
  std::vector<Request> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  static std::string header(const std::string& head, const std::string& name) {
    std::istringstream in(head);
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      const auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string key = line.substr(0, colon);
      for (auto& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (key == name) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
    return "";
  }

  void serve() {
    while (!stop_) {
      asio::ip::tcp::socket sock(ioc_);
      boost::system::error_code ec;
      acceptor_.accept(sock, ec);
      if (ec || stop_) return;
      asio::streambuf buf;
      asio::read_until(sock, buf, "\r\n\r\n", ec);
      if (ec) continue;
      std::string data(asio::buffers_begin(buf.data()), asio::buffers_end(buf.data()));
      const auto headEnd = data.find("\r\n\r\n");
      const std::string head = data.substr(0, headEnd);
      std::string body = data.substr(headEnd + 4);
      const std::string len = header(head, "content-length");
      const size_t want = len.empty() ? 0 : std::stoul(len);
      while (body.size() < want) {
        char chunk[4096];
        const size_t n = sock.read_some(asio::buffer(chunk), ec);
        if (ec) break;
        body.append(chunk, n);
      }
      Request req;
      std::istringstream first(head);
      first >> req.method >> req.target;
      req.body = body;
      req.authorization = header(head, "authorization");
      req.acceptEncoding = header(head, "accept-encoding");
      {
        std::lock_guard<std::mutex> lock(mu_);
        requests_.push_back(req);
      }
      const Reply r = handler_(req);
      std::string out = "HTTP/1.1 " + std::to_string(r.status) + " X\r\nContent-Type: " +
                        "application/json\r\nContent-Length: " + std::to_string(r.body.size()) +
                        "\r\nConnection: close\r\n";
      if (!r.contentEncoding.empty()) out += "Content-Encoding: " + r.contentEncoding + "\r\n";
      out += "\r\n" + r.body;
      asio::write(sock, asio::buffer(out), ec);
    }
  }

  std::function<Reply(const Request&)> handler_;
  asio::io_context ioc_;
  asio::ip::tcp::acceptor acceptor_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<Request> requests_;
};

using trainscope::cli::testing::cli;
using trainscope::cli::testing::Run;

json rankStatus(uint32_t rank, const std::string& state, const std::string& detail = "",
                uint64_t bytes = 0) {
  return json{{"rank", rank},     {"node", "n" + std::to_string(rank % 2)},
              {"state", state},   {"detail", detail},
              {"bytes", bytes},   {"truncated", false},
              {"first_step", 18}, {"last_step", 22},
              {"updated_ns", 1}};
}

json captureJson(const std::string& state, std::vector<json> ranks,
                 const std::string& kind = "trace") {
  return json{{"id", "cap-1-abcd"},
              {"job", "j"},
              {"kind", kind},
              {"state", state},
              {"reason", "on request"},
              {"anomaly_id", nullptr},
              {"ranks", {0, 5}},
              {"start_step", 20},
              {"steps", 3},
              {"history", 2},
              {"created_ns", 1},
              {"deadline_ns", 0},
              {"summary", state == "running" ? "0 of 2 ranks done" : "some summary"},
              {"rank_status", ranks}};
}

std::string readAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A capture API whose GET /api/v1/captures/{id} walks through `states` one poll at a time
// (staying on the last) and whose /trace serves `trace` gzip-compressed.
struct Scripted {
  std::vector<json> states;
  json trace = json{{"traceEvents", json::array({json{{"name", "ProfilerStep#20"}}})}};
  std::atomic<size_t> polls{0};
  Reply handle(const Request& r) {
    if (r.method == "POST" && r.target == "/api/v1/jobs/j/captures") {
      Reply rep{201, states.front().dump(), ""};
      return rep;
    }
    if (r.method == "GET" && r.target == "/api/v1/captures/cap-1-abcd") {
      const size_t i = std::min(++polls, states.size() - 1);
      return {200, states[i].dump(), ""};
    }
    if (r.method == "GET" && r.target == "/api/v1/captures/cap-1-abcd/trace") {
      return {200, *gzipCompress(trace.dump()), "gzip"};
    }
    return {404, R"({"error":"no route"})", ""};
  }
};

}  // namespace

TEST_CASE("cli capture: rank lists parse ranges and name the bad item", "[cli]") {
  auto r = parseRankList("7,0,3,5-6,3");
  REQUIRE(r.isOk());
  CHECK(*r == std::vector<uint32_t>{0, 3, 5, 6, 7});
  CHECK(parseRankList("4-4")->size() == 1);
  CHECK_THAT(parseRankList("0,x").message(), Catch::Contains("'x'"));
  CHECK_THAT(parseRankList("6-2").message(), Catch::Contains("ends before it starts"));
  CHECK_FALSE(parseRankList("").isOk());
  CHECK_FALSE(parseRankList("1,,2").isOk());
  CHECK_FALSE(parseRankList("-3").isOk());
  CHECK(formatRankList({0, 1, 2, 3, 5, 7, 8}) == "0-3,5,7,8");
  CHECK(formatRankList({}) == "-");
}

TEST_CASE("cli capture: gzip round trip; a cut or foreign file is refused", "[cli]") {
  const std::string text(100000, 'x');
  auto gz = gzipCompress(text);
  REQUIRE(gz.isOk());
  CHECK(gz->size() < 1000);
  CHECK(*gunzip(*gz) == text);
  CHECK_THAT(gunzip(gz->substr(0, gz->size() / 2)).message(), Catch::Contains("not valid gzip"));
  CHECK_FALSE(gunzip("{\"plain\": 1}").isOk());
}

TEST_CASE("cli capture: the request body carries only the fields given", "[cli]") {
  CaptureArgs a;
  a.job = "j";
  CHECK(captureRequestBody(a) == json{{"kind", "trace"}});
  a.ranks = std::vector<uint32_t>{0, 5};
  a.steps = 3;
  a.history = 2;
  a.startStep = 40;
  a.maxMb = 1.5;
  a.reason = "slow step";
  CHECK(captureRequestBody(a) == json{{"kind", "trace"},
                                      {"ranks", {0, 5}},
                                      {"steps", 3},
                                      {"history", 2},
                                      {"start_step", 40},
                                      {"max_bytes", 1572864},
                                      {"reason", "slow step"}});
}

TEST_CASE("cli capture --wait: progress per rank, exit 0, --out plain and gzip, token", "[cli]") {
  Scripted s;
  s.states = {
      captureJson("running", {rankStatus(0, "pending"), rankStatus(5, "pending")}),
      captureJson("running", {rankStatus(0, "recording", "steps 20..22, history from 18"),
                              rankStatus(5, "pending")}),
      captureJson("running",
                  {rankStatus(0, "done", "", 2048), rankStatus(5, "uploading", "", 1024)}),
      captureJson("complete", {rankStatus(0, "done", "", 2048), rankStatus(5, "done", "", 4096)})};
  FakeApi api([&](const Request& r) { return s.handle(r); });
  const std::string out = "/tmp/cli_capture_test_" + std::to_string(::getpid()) + ".json";
  Run r = cli({"--server", api.url(), "--token", "s3cret", "capture", "j", "--ranks", "0,5",
               "--steps", "3", "--history", "2", "--reason", "look", "--wait", "--out", out});
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("rank 0 (n0): recording: steps 20..22, history from 18\n") != std::string::npos);
  CHECK(r.out.find("rank 5 (n1): uploading: 1.0 KiB") != std::string::npos);
  CHECK(r.out.find("rank 5 (n1): done: 4.0 KiB, steps 18..22") != std::string::npos);
  // A state printed once is not repeated on the next poll.
  CHECK(r.out.find("rank 0 (n0): done") == r.out.rfind("rank 0 (n0): done"));
  CHECK(r.out.find("capture cap-1-abcd complete") != std::string::npos);
  CHECK(json::parse(readAll(out)) == s.trace);
  auto reqs = api.requests();
  REQUIRE(!reqs.empty());
  CHECK(reqs[0].method == "POST");
  CHECK(
      json::parse(reqs[0].body) ==
      json{{"kind", "trace"}, {"ranks", {0, 5}}, {"steps", 3}, {"history", 2}, {"reason", "look"}});
  for (const auto& q : reqs) CHECK(q.authorization == "Bearer s3cret");
  std::remove(out.c_str());

  // A .gz name keeps the collector's gzip as it came.
  s.polls = 0;
  const std::string gz = out + ".gz";
  r = cli({"--server", api.url(), "capture", "j", "--out", gz});
  CHECK(r.code == 0);
  auto plain = gunzip(readAll(gz));
  REQUIRE(plain.isOk());
  CHECK(json::parse(*plain) == s.trace);
  std::remove(gz.c_str());
}

TEST_CASE("cli capture --wait: partial exits 3, failed 5, timeout 5, API errors 1", "[cli]") {
  Scripted s;
  s.states = {captureJson("running", {rankStatus(0, "pending"), rankStatus(5, "pending")}),
              captureJson("partial", {rankStatus(0, "done", "", 10),
                                      rankStatus(5, "failed", "rank exited at step 19")})};
  FakeApi api([&](const Request& r) { return s.handle(r); });
  Run r = cli({"--server", api.url(), "capture", "j", "--wait"});
  CHECK(r.code == kExitPartial);
  CHECK(r.out.find("rank 5 (n1): failed: rank exited at step 19") != std::string::npos);

  s.polls = 0;
  s.states[1] = captureJson("failed", {rankStatus(0, "failed", "timed out in state recording"),
                                       rankStatus(5, "failed", "gone")});
  r = cli({"--server", api.url(), "capture", "j", "--wait", "--out", "/nonexistent/x.json"});
  CHECK(r.code == kExitCaptureFailed);
  CHECK(r.out.find("capture cap-1-abcd failed") != std::string::npos);

  s.polls = 0;
  s.states.resize(1);  // stays running
  r = cli({"--server", api.url(), "capture", "j", "--wait", "--timeout", "1"});
  CHECK(r.code == kExitCaptureFailed);
  CHECK_THAT(r.err, Catch::Contains("still running after --timeout 1 s ("));
  s.polls = 0;
  r = cli({"--server", api.url(), "capture", "j", "--wait", "--timeout", "0.25"});
  CHECK(r.code == kExitCaptureFailed);
  CHECK_THAT(r.err, Catch::Contains("still running after --timeout 250 ms ("));

  FakeApi refusing([](const Request&) {
    return Reply{409, R"({"error":"start step 3 already passed: rank 0 is at step 9"})", ""};
  });
  r = cli({"--server", refusing.url(), "capture", "j", "--start-step", "3"});
  CHECK(r.code == kExitApiError);
  CHECK(r.err == "trainscope: start step 3 already passed: rank 0 is at step 9\n");
}

TEST_CASE("cli capture: without --wait prints the id; --json prints the capture", "[cli]") {
  Scripted s;
  s.states = {captureJson("running", {rankStatus(0, "pending"), rankStatus(5, "pending")})};
  FakeApi api([&](const Request& r) { return s.handle(r); });
  Run r = cli({"--server", api.url(), "capture", "j"});
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("capture cap-1-abcd (trace) of job j started: ranks 0,5, "
                                    "steps 20..22 (+2 before)"));
  r = cli({"--server", api.url(), "--json", "capture", "j"});
  CHECK(r.code == 0);
  CHECK(json::parse(r.out)["id"] == "cap-1-abcd");
}

TEST_CASE("cli capture: bad flags are usage errors (exit 2) naming the flag", "[cli]") {
  Run r = cli({"capture", "j", "--ranks", "1,x"});
  CHECK(r.code == kExitUsage);
  CHECK_THAT(r.err, Catch::Contains("--ranks '1,x'"));
  r = cli({"capture", "j", "--steps", "0"});
  CHECK(r.code == kExitUsage);
  CHECK_THAT(r.err, Catch::Contains("--steps"));
  r = cli({"capture"});
  CHECK(r.code == kExitUsage);
  CHECK_THAT(r.err, Catch::Contains("job"));
  r = cli({"capture", "--help"});
  CHECK(r.code == 0);
  for (const char* flag : {"--ranks", "--steps", "--history", "--start-step", "--max-mb",
                           "--reason", "--wait", "--timeout", "--out"}) {
    CHECK_THAT(r.out, Catch::Contains(flag));
  }
  r = cli({"--help"});
  CHECK_THAT(r.out, Catch::Contains("TRAINSCOPE_TOKEN"));
}

TEST_CASE("cli captures: table of a job's captures", "[cli]") {
  json list = {{"captures",
                {captureJson("complete", {}), json{{"id", "cap-2-ffff"},
                                                   {"kind", "stacks"},
                                                   {"state", "running"},
                                                   {"reason", "anomaly j/hang/1: hang"},
                                                   {"ranks", {0, 1, 2, 3}},
                                                   {"created_ns", 1}}}}};
  FakeApi api([&](const Request& r) {
    if (r.target == "/api/v1/jobs/j/captures") return Reply{200, list.dump(), ""};
    return Reply{404, R"({"error":"unknown job 'x'"})", ""};
  });
  Run r = cli({"--server", api.url(), "captures", "j"});
  CHECK(r.code == 0);
  INFO(r.out);
  CHECK_THAT(r.out, Catch::StartsWith("ID          KIND    STATE     RANKS  STEPS"));
  CHECK_THAT(r.out, Catch::Contains("cap-1-abcd  trace   complete  0,5    20..22 (+2 before)  "
                                    "on request"));
  CHECK_THAT(r.out, Catch::Contains("cap-2-ffff  stacks  running   0-3    -"));
  r = cli({"--server", api.url(), "captures", "x"});
  CHECK(r.code == 1);
  CHECK(r.err == "trainscope: unknown job 'x'\n");
}

TEST_CASE("cli stacks: threads per rank, the rank whose main thread differs is marked", "[cli]") {
  auto thread = [](int tid, const std::string& name, const std::vector<std::string>& fns,
                   json python = json::array()) {
    json native = json::array();
    for (const auto& f : fns) {
      native.push_back({{"address", "0x1"}, {"function", f}, {"offset", 4}, {"module", "/x.so"}});
    }
    return json{
        {"tid", tid}, {"name", name}, {"state", "S"}, {"native", native}, {"python", python}};
  };
  const std::vector<std::string> waiting = {
      "clock_nanosleep", "_ZN10trainscope3sim23simulatedCollectiveWaitEl",
      "trainscope::sim::(anonymous namespace)::loop(std::vector<int, std::allocator<int> > const&) "
      "const",
      "main"};
  json merged = {
      {"kind", "stacks"},
      {"capture", captureJson("complete", {}, "stacks")},
      {"ranks",
       {json{{"rank", 0}, {"node", "n0"}, {"threads", {thread(100, "sim", waiting)}}},
        json{{"rank", 1},
             {"node", "n1"},
             {"threads",
              {thread(200, "python3", {"epoll_wait"},
                      json::array({json{
                          {"function", "train_step"}, {"file", "/a/train.py"}, {"line", 42}}})),
               json{{"tid", 201},
                    {"name", "t"},
                    {"state", "R"},
                    {"native", json::array()},
                    {"error", "no answer"}}}}},
        json{{"rank", 2}, {"node", "n0"}, {"threads", {thread(300, "sim", waiting)}}}}}};
  std::ostringstream out;
  renderStacks(merged, out);
  const std::string text = out.str();
  INFO(text);
  CHECK_THAT(text, Catch::Contains("rank 0 (n0): 1 threads\n  100 sim [S]  clock_nanosleep < "
                                   "trainscope::sim::simulatedCollectiveWait < "
                                   "trainscope::sim::loop < main\n"));
  CHECK_THAT(text, Catch::Contains("rank 1 (n1): 2 threads   <== top frames differ"));
  CHECK_THAT(text, Catch::Contains("200 python3 [S]  train_step (train.py:42) < epoll_wait"));
  CHECK_THAT(text, Catch::Contains("201 t [R]  (no frames: no answer)"));
  CHECK(text.find("rank 2 (n0): 1 threads\n") != std::string::npos);

  // Through the command: POST kind stacks, wait, then the merged file rendered.
  std::atomic<int> polls{0};
  FakeApi api([&](const Request& r) {
    if (r.method == "POST") {
      return Reply{201, captureJson("running", {rankStatus(0, "pending")}, "stacks").dump(), ""};
    }
    if (r.target == "/api/v1/captures/cap-1-abcd") {
      ++polls;
      return Reply{200, captureJson("complete", {rankStatus(0, "done", "", 99)}, "stacks").dump(),
                   ""};
    }
    if (r.target == "/api/v1/captures/cap-1-abcd/trace") return Reply{200, merged.dump(), ""};
    return Reply{404, "{}", ""};
  });
  Run r = cli({"--server", api.url(), "stacks", "j", "--ranks", "0-2", "--wait"});
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("<== top frames differ"));
  auto reqs = api.requests();
  REQUIRE(!reqs.empty());
  CHECK(json::parse(reqs[0].body) == json{{"kind", "stacks"}, {"ranks", {0, 1, 2}}});
}
