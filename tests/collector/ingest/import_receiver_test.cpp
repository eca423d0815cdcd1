// ImportReceiver (collector/ingest/import_receiver.h), the collector's door for `trainscope
// import`: a bundle uploaded in chunks and committed is stored all at once and handed to the
// onCommitted hook; a chunk out of order says where to resume; every kind of bad commit (a
// file corrupted in transit, a step of another job, a rank file for a rank with no steps, an
// existing job without append) is refused with a message naming what is wrong, stores nothing
// and leaves no staged files behind.
#include "collector/ingest/import_receiver.h"

#include <zlib.h>

#include <filesystem>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <google/protobuf/util/delimited_message_util.h>
#include <catch2/catch.hpp>

#include "collector/storage/store.h"
#include "common/clock.h"
#include "schema/wire.h"
#include "tests/common/support.h"

using namespace trainscope;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// steps.pb of `job`: a hello and `steps` reports for each of `ranks`, then goodbyes.
std::string stepsFile(const std::string& job, uint32_t ranks, int64_t steps,
                      const std::string& stepJob = "") {
  std::ostringstream out;
  auto put = [&](const wire::Envelope& env) {
    REQUIRE(google::protobuf::util::SerializeDelimitedToOstream(env, &out));
  };
  for (uint32_t r = 0; r < ranks; ++r) {
    wire::Envelope env;
    env.set_schema_version(wire::kSchemaVersion);
    auto* info = env.mutable_rank_hello()->mutable_rank();
    info->set_job(job);
    info->set_rank(r);
    info->set_world_size(ranks);
    info->set_host("h");
    put(env);
  }
  const int64_t t0 = 1'700'000'000'000'000'000;
  for (int64_t s = 0; s < steps; ++s) {
    for (uint32_t r = 0; r < ranks; ++r) {
      wire::Envelope env;
      env.set_schema_version(wire::kSchemaVersion);
      auto* rep = env.mutable_step();
      rep->set_job(stepJob.empty() ? job : stepJob);
      rep->set_rank(r);
      rep->set_step(s);
      rep->set_start_ns(t0 + s * 10'000'000);
      rep->set_end_ns(t0 + (s + 1) * 10'000'000);
      rep->set_duration_ns(10'000'000);
      rep->set_compute_ns(8'000'000);
      put(env);
    }
  }
  for (uint32_t r = 0; r < ranks; ++r) {
    wire::Envelope env;
    env.set_schema_version(wire::kSchemaVersion);
    auto* bye = env.mutable_rank_goodbye();
    bye->set_job(job);
    bye->set_rank(r);
    bye->set_last_step(steps - 1);
    put(env);
  }
  return out.str();
}

uint32_t crcOf(const std::string& data) {
  return static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0),
                                     reinterpret_cast<const Bytef*>(data.data()),
                                     static_cast<uInt>(data.size())));
}

// A gzip member holding `text` (a rank file's timeline).
std::string gzipOf(const std::string& text) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) ==
          Z_OK);
  std::string out(deflateBound(&z, static_cast<uLong>(text.size())) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

struct Fixture {
  explicit Fixture(const std::function<void(ingest::ImportReceiverOptions&)>& tweak = {}) {
    storage::SqliteOptions so;
    so.path = dir.path() + "/store.db";
    auto opened = storage::openSqliteStore(so);
    REQUIRE(opened.isOk());
    store = std::move(opened.value());
    ingest::ImportReceiverOptions o;
    o.dir = dir.path() + "/captures";
    o.onCommitted = [this](const storage::WriteBatch& b) { committedSteps += b.steps.size(); };
    o.onTimeline = [this](const storage::CaptureRow& row) -> Result<storage::CaptureRow> {
      timelines.push_back(row);
      return row;
    };
    if (tweak) tweak(o);
    receiver = std::make_unique<ingest::ImportReceiver>(o, *store, clock);
  }

  std::string begin(const std::string& job, const std::string& body = "") {
    auto r = receiver->begin(job, body);
    INFO(r.status.message());
    REQUIRE(r.created);
    return r.body["id"].get<std::string>();
  }
  // Uploads `data` as `name` in chunks of `chunk` bytes; returns the commit's entry for it.
  json upload(const std::string& id, const std::string& name, const std::string& data,
              size_t chunk = 1000) {
    for (size_t off = 0; off < data.size(); off += chunk) {
      auto r = receiver->put(id, name, off, std::string_view(data).substr(off, chunk));
      INFO(r.status.message());
      REQUIRE(r.status.isOk());
    }
    return json{{"name", name}, {"bytes", data.size()}, {"crc32", crcOf(data)}};
  }
  size_t storedSteps(const std::string& job) {
    storage::StepQuery q;
    q.job = job;
    q.limit = 100000;
    auto rows = store->steps(q);
    REQUIRE(rows.isOk());
    return rows->size();
  }
  // Staged session directories left under the capture directory.
  size_t stagedDirs() {
    size_t n = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir.path() + "/captures", ec))
      n += e.is_directory();
    return n;
  }

  tests::TempDir dir;
  ManualClock clock{1'000'000'000'000};
  std::unique_ptr<storage::Store> store;
  std::unique_ptr<ingest::ImportReceiver> receiver;
  size_t committedSteps = 0;
  std::vector<storage::CaptureRow> timelines;
};

}  // namespace

TEST_CASE("an uploaded bundle is stored in one commit and handed to the detectors' hook") {
  Fixture f;
  const std::string id = f.begin("job-a", R"({"reason": "test import"})");
  const std::string steps = stepsFile("job-a", 2, 50);
  const std::string timeline = gzipOf(R"({"traceEvents": []})");
  json files =
      json::array({f.upload(id, "steps.pb", steps), f.upload(id, "rank-1.json.gz", timeline, 7)});
  files[1]["first_step"] = 0;
  files[1]["last_step"] = 49;
  files[1]["source"] = "trace_rank1.json";
  CHECK(f.storedSteps("job-a") == 0);  // nothing before the commit

  auto r = f.receiver->commit(id, json{{"files", files}}.dump());
  INFO(r.status.message());
  REQUIRE(r.created);
  CHECK(r.body["steps"] == 100);
  CHECK(r.body["ranks"] == json::array({0, 1}));
  CHECK(r.body["world_size"] == 2);
  CHECK(r.body["capture"] == id);
  CHECK(f.storedSteps("job-a") == 100);
  CHECK(f.committedSteps == 100);
  auto ranks = f.store->ranks("job-a");
  REQUIRE(ranks.isOk());
  REQUIRE(ranks->size() == 2);
  for (const auto& row : *ranks) {
    CHECK(row.node == "import");
    CHECK(row.ended);
  }
  REQUIRE(f.timelines.size() == 1);
  CHECK(f.timelines[0].kind == "import");
  CHECK(f.timelines[0].ranks == std::vector<uint32_t>{1});
  CHECK(f.timelines[0].startStep == 0);
  CHECK(f.timelines[0].steps == 50);
  CHECK(f.timelines[0].reason == "test import");
  // The rank file stays where the capture stage serves it; steps.pb is gone.
  CHECK(fs::exists(f.dir.path() + "/captures/" + id + "/rank-1.json.gz"));
  CHECK_FALSE(fs::exists(f.dir.path() + "/captures/" + id + "/steps.pb.part"));
  // The session is closed.
  CHECK(f.receiver->commit(id, json{{"files", files}}.dump()).status.code() ==
        StatusCode::kNotFound);

  SECTION("the job exists now: a second import needs append") {
    auto again = f.receiver->begin("job-a", "");
    CHECK(again.status.code() == StatusCode::kConflict);
    CHECK(again.status.message().find("exists already") != std::string::npos);
    CHECK(f.receiver->begin("job-a", R"({"append": true})").created);
  }
}

TEST_CASE("a chunk that does not follow says where to resume") {
  Fixture f;
  const std::string id = f.begin("job-b");
  CHECK(f.receiver->put(id, "steps.pb", 0, "abcd").status.isOk());
  auto r = f.receiver->put(id, "steps.pb", 10, "efgh");
  CHECK(r.status.code() == StatusCode::kConflict);
  CHECK(r.body["bytes"] == 4);
  CHECK(f.receiver->put(id, "steps.pb", 4, "efgh").body["bytes"] == 8);
  CHECK(f.receiver->put(id, "notes.txt", 0, "x").status.code() == StatusCode::kInvalidArgument);
  CHECK(f.receiver->put("imp-nope", "steps.pb", 0, "x").status.code() == StatusCode::kNotFound);
  CHECK(f.receiver->begin("job-b", R"({"colour": 1})").status.code() ==
        StatusCode::kInvalidArgument);
}

TEST_CASE("a bad commit stores nothing, names what is wrong and leaves no files") {
  Fixture f;
  const std::string steps = stepsFile("job-c", 2, 10);
  std::string id;
  json files;
  std::string want;

  SECTION("a file corrupted in transit") {
    id = f.begin("job-c");
    files = json::array({f.upload(id, "steps.pb", steps)});
    files[0]["crc32"] = files[0]["crc32"].get<uint32_t>() ^ 1u;
    want = "steps.pb: its crc32 does not match";
  }
  SECTION("fewer bytes than the client sent") {
    id = f.begin("job-c");
    files = json::array({f.upload(id, "steps.pb", steps)});
    files[0]["bytes"] = steps.size() + 1;
    want = "bytes arrived, the client sent";
  }
  SECTION("a step of another job") {
    id = f.begin("job-c");
    files = json::array({f.upload(id, "steps.pb", stepsFile("job-c", 2, 10, "job-x"))});
    want = "is not for a rank of this import's job";
  }
  SECTION("a steps file cut short") {
    id = f.begin("job-c");
    files = json::array({f.upload(id, "steps.pb", steps.substr(0, steps.size() - 3))});
    want = "not a length-prefixed Envelope (or cut short)";
  }
  SECTION("a timeline of a rank that has no steps") {
    id = f.begin("job-c");
    files = json::array(
        {f.upload(id, "steps.pb", steps), f.upload(id, "rank-5.json.gz", gzipOf("{}"))});
    want = "rank-5.json.gz is for a rank steps.pb does not name";
  }
  SECTION("an uploaded file the commit does not name") {
    id = f.begin("job-c");
    files = json::array({f.upload(id, "steps.pb", steps)});
    f.upload(id, "rank-0.json.gz", gzipOf("{}"));
    want = "rank-0.json.gz was uploaded, not named";
  }
  auto r = f.receiver->commit(id, json{{"files", files}}.dump());
  INFO(r.status.message());
  CHECK(r.status.code() == StatusCode::kInvalidArgument);
  CHECK(r.status.message().find(want) != std::string::npos);
  CHECK(f.storedSteps("job-c") == 0);
  CHECK(f.committedSteps == 0);
  CHECK(f.timelines.empty());
  CHECK(f.stagedDirs() == 0);
  CHECK(f.receiver->stats().failed == 1);
}

TEST_CASE("sessions idle past the timeout are dropped with their files") {
  Fixture f;
  const std::string id = f.begin("job-d");
  CHECK(f.receiver->put(id, "steps.pb", 0, "abcd").status.isOk());
  CHECK(f.stagedDirs() == 1);
  f.clock.advance(601'000'000'000);
  CHECK(f.receiver->put(id, "steps.pb", 4, "efgh").status.code() == StatusCode::kNotFound);
  CHECK(f.stagedDirs() == 0);
  CHECK(f.receiver->stats().aborted == 1);
}

TEST_CASE("open imports are bounded in number and in bytes on disk, each refusal saying why") {
  Fixture f([](ingest::ImportReceiverOptions& o) {
    o.maxOpen = 2;
    o.maxOpenBytes = 10;
  });
  const std::string a = f.begin("job-e");
  const std::string b = f.begin("job-f");
  auto third = f.receiver->begin("job-g", "");
  CHECK(third.status.code() == StatusCode::kUnavailable);
  CHECK_THAT(third.status.message(), Catch::Matchers::Contains("--import-max-open"));

  CHECK(f.receiver->put(a, "steps.pb", 0, "123456").status.isOk());
  auto over = f.receiver->put(b, "steps.pb", 0, "12345");  // 6 + 5 > 10 together
  CHECK(over.status.code() == StatusCode::kTooLarge);
  CHECK_THAT(over.status.message(), Catch::Matchers::Contains("--import-max-open-bytes"));
  CHECK(f.stagedDirs() == 2);  // refused, not dropped: it may resume
  CHECK(f.receiver->put(b, "steps.pb", 0, "1234").status.isOk());

  // An aborted import gives its bytes and its place back.
  CHECK(f.receiver->abort(a).status.isOk());
  CHECK(f.receiver->put(b, "steps.pb", 4, "123456").status.isOk());
  CHECK(f.receiver->begin("job-g", "").created);
}

TEST_CASE("a chunk that would leave the disk too full is refused, naming the disk") {
  Fixture f([](ingest::ImportReceiverOptions& o) { o.minFreeBytes = uint64_t{1} << 62; });
  const std::string id = f.begin("job-h");
  auto r = f.receiver->put(id, "steps.pb", 0, "abcd");
  CHECK(r.status.code() == StatusCode::kTooLarge);
  CHECK_THAT(r.status.message(), Catch::Matchers::Contains("bytes free"));
}

TEST_CASE("import bodies nested past 32 levels are refused, not parsed") {
  Fixture f;
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  CHECK(f.receiver->begin("job-i", deep).status.code() == StatusCode::kInvalidArgument);
  const std::string id = f.begin("job-i");
  auto r = f.receiver->commit(id, "{\"files\":" + deep + "}");
  CHECK(r.status.code() == StatusCode::kInvalidArgument);
}
