// The `trainscope` command line: one function per subcommand, a small blocking HTTP client for
// the collector's JSON API and the table formatting. Everything writes to the streams it is
// given, so tests run commands in-process. Single-threaded: call from one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/percent_encode.h"
#include "common/status.h"

namespace trainscope::cli {

// Exit codes, one meaning each (`trainscope --help` and docs/API.md list them; `run` exits
// with its command's status instead). A message on stderr says more for every one but 0.
inline constexpr int kExitOk = 0;
inline constexpr int kExitApiError = 1;       // the collector answered with an error
inline constexpr int kExitUsage = 2;          // bad flags or arguments
inline constexpr int kExitPartial = 3;        // a capture ended with some ranks failed
inline constexpr int kExitUnreachable = 4;    // no answer from the collector at all
inline constexpr int kExitCaptureFailed = 5;  // a capture failed, or outlived --timeout
inline constexpr int kExitLocalError = 6;     // an input that cannot be read or used, an
                                              // output that cannot be written (files, keys)
inline constexpr const char* kDefaultServer = "http://127.0.0.1:7600";

struct GlobalOptions {
  std::string server = kDefaultServer;  // collector base URL (flag, else $TRAINSCOPE_SERVER)
  bool json = false;                    // print the API's JSON instead of a table
  int timeoutMs = 5000;                 // connect + request; short so a dead collector is
                                        // reported quickly rather than hanging a shell
  std::string token;                    // sent as "Authorization: Bearer" when not empty
                                        // (flag, else $TRAINSCOPE_TOKEN); a collector started
                                        // with --http-token refuses changes without it
};

// What every subcommand gets: options, output streams and the time used for "3s ago".
struct Context {
  GlobalOptions global;
  std::ostream& out;
  std::ostream& err;
  int64_t nowNs = 0;
};

// ---- HTTP client -------------------------------------------------------------------------

struct ServerUrl {
  std::string host;
  std::string port = "80";
  std::string basePath;  // without a trailing '/', e.g. "" or "/trainscope"
};

// Accepts http://HOST[:PORT][/PATH] (and HOST:PORT without a scheme). https is refused.
Result<ServerUrl> parseServerUrl(const std::string& url);

struct HttpRequest {
  std::string method = "GET";  // GET, POST, PUT, DELETE
  std::string target;          // path and query, with the server's base path already in front
  std::string body;            // sent (as contentType) when not empty, and always with POST/PUT
  std::string contentType = "application/json";
  std::string bearerToken;  // "" sends no Authorization header
  bool acceptGzip = false;  // ask for Content-Encoding: gzip (stored capture files)
};

struct HttpReply {
  unsigned status = 0;
  std::string body;
  std::string contentEncoding;  // "gzip" when the body is compressed
  std::string location;         // the Location header of a 201
};

// One request with an overall deadline covering resolve, connect, write and read. A failure to
// get any HTTP answer is an error whose message is the reason ("Connection refused", "timed
// out"); a server that answered with bytes that are not HTTP (such as the collector's ZeroMQ
// ingest port) is a kMalformed error naming HOST:PORT and what it looks like.
Result<HttpReply> httpRequest(const ServerUrl& server, const HttpRequest& request,
                              std::chrono::milliseconds timeout);
// httpRequest with a plain GET.
Result<HttpReply> httpGet(const ServerUrl& server, const std::string& target,
                          std::chrono::milliseconds timeout);

// GETs `target` from the collector and parses the JSON. On failure prints the one-line
// message to ctx.err and sets the exit code: kExitUsage for a --server URL that does not
// parse, kExitUnreachable when no HTTP answer came, kExitApiError for an error answer.
Result<nlohmann::json> fetchJson(Context& ctx, const std::string& target, int* exitCode);
// Any request whose answer is JSON (its target relative to the server's base path, the token
// added), with its own deadline; failures reported like fetchJson's.
Result<nlohmann::json> requestJson(Context& ctx, HttpRequest request,
                                   std::chrono::milliseconds timeout, int* exitCode);
// The same for a POST of `body` (JSON text).
Result<nlohmann::json> postJson(Context& ctx, const std::string& target, const std::string& body,
                                int* exitCode);
// The same without parsing: the raw reply of a GET (gzip kept when `acceptGzip`), waiting up
// to `timeout` (downloads may be larger than the JSON answers --timeout-ms is meant for).
Result<HttpReply> fetchRaw(Context& ctx, const std::string& target, bool acceptGzip,
                           std::chrono::milliseconds timeout, int* exitCode);
// Prints a table subcommand's JSON under --json and returns nothing (*exitCode = kExitOk);
// otherwise returns the body for the table. On failure nothing, with fetchJson's exit code.
std::optional<nlohmann::json> fetchForTable(Context& ctx, const std::string& target, int* exitCode);
// Fields of the API's JSON for tables: a missing or null one reads as "-" (text) or `fallback`
// rather than failing the table; booleans read "yes"/"no", other values as their JSON.
std::string fieldText(const nlohmann::json& j, const char* key);
int64_t fieldInt(const nlohmann::json& j, const char* key, int64_t fallback = 0);
// "/api/v1/jobs/<job, encoded>/<what>".
std::string jobPath(const std::string& job, const char* what);
// `path` with the query parameters appended, values percent-encoded.
std::string withQuery(std::string path, const std::vector<std::pair<std::string, std::string>>& q);
// "0,3,5" from a JSON array of numbers or strings under `key`; "-" when absent or empty.
std::string listText(const nlohmann::json& j, const char* key);

// ---- formatting --------------------------------------------------------------------------

std::string formatDurationMs(int64_t ns);   // "12.34 ms"
std::string formatSeconds(double seconds);  // "20 s", "1.5 s", "12.3 s", "250 ms", "0.25 ms"
std::string formatBytes(uint64_t bytes);    // "512 B", "1.5 KiB", "16.0 GiB"
std::string formatAge(int64_t ageNs);       // "just now", "3s ago", "5m ago", "2h ago", "4d ago"
std::string formatPercent(double percent);  // "37.5%"

// A text table: text columns left-aligned, numeric columns right-aligned, two spaces between.
class Table {
 public:
  struct Column {
    std::string title;
    bool alignRight = false;
  };
  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {}
  void addRow(std::vector<std::string> cells);
  size_t rows() const { return rows_.size(); }
  void render(std::ostream& out) const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// ---- subcommands -------------------------------------------------------------------------
// Each runs against the collector and returns the process exit code.

struct StepsArgs {
  std::string job;
  std::optional<uint32_t> rank;
  std::optional<int64_t> from;
  std::optional<int64_t> to;
  std::optional<uint32_t> limit;
  bool detail = false;  // a block per row with its figures and longest operators and collectives
};

struct SummaryArgs {
  std::string job;
  std::optional<int64_t> from;
  std::optional<int64_t> to;
  std::optional<uint32_t> limit;
};

int runJobs(Context& ctx);
int runRanks(Context& ctx, const std::string& job);
int runSteps(Context& ctx, const StepsArgs& args);
int runSummary(Context& ctx, const SummaryArgs& args);
int runNodes(Context& ctx);
// A job's anomalies: id, kind, ranks, nodes, onset, detected, magnitude, state, summary.
int runAnomalies(Context& ctx, const std::string& job);

// Registering a subcommand: add it to `app` and, in its parse callback, set `*action` to what
// runs it. Adding a subcommand is one more of these and one line in buildApp().
using Action = std::function<int(Context&)>;
void addJobsCommand(CLI::App& app, Action* action);
void addRanksCommand(CLI::App& app, Action* action);
void addStepsCommand(CLI::App& app, Action* action);
void addSummaryCommand(CLI::App& app, Action* action);
void addNodesCommand(CLI::App& app, Action* action);
void addAnomaliesCommand(CLI::App& app, Action* action);
// detect: tools/cli/detect_cmd.cpp.
void addDetectCommand(CLI::App& app, Action* action);
// capture, captures and stacks: tools/cli/capture_cmd.cpp.
void addCaptureCommand(CLI::App& app, Action* action);
void addCapturesCommand(CLI::App& app, Action* action);
void addStacksCommand(CLI::App& app, Action* action);
// import: tools/cli/import_cmd.cpp.
void addImportCommand(CLI::App& app, Action* action);
// run (zero-code monitoring of a training command): tools/cli/run_cmd.cpp. `afterDashes`: the
// words after the first "--" of the command line, which runCli keeps from CLI11 (its "--"
// handling hands them to the parent app, which rejects them); nothing when there was no "--".
void addRunCommand(CLI::App& app, Action* action,
                   const std::optional<std::vector<std::string>>& afterDashes);

// The whole CLI: parses `args` (without the program name), runs the chosen subcommand and
// returns the exit code. Usage errors print CLI11's message and return kExitUsage; an unknown
// subcommand is named, with the nearest one when it looks like a typo.
int runCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace trainscope::cli
