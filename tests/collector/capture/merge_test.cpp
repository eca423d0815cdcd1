// Merging rank files: events of ranks on nodes with different clock offsets end up on the
// collector's clock, each rank is one named process, every event is kept, and a broken rank
// file is reported and left out. Stacks files merge side by side.
#include <fstream>
#include <map>
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "collector/capture/gzip_file.h"
#include "collector/capture/merge.h"
#include "tests/collector/capture/capture_fixture.h"

using namespace trainscope;
using namespace trainscope::capture;
using nlohmann::json;

namespace {

json readMerged(const std::string& path) {
  auto text = readGzipFile(path, DecompressLimits{});
  REQUIRE(text);
  auto doc = json::parse(*text, nullptr, false);
  REQUIRE_FALSE(doc.is_discarded());
  return doc;
}

DescribeCapture describeAs(std::map<uint32_t, std::string>* seen) {
  return [seen](const std::map<uint32_t, std::string>& failures) {
    *seen = failures;
    return json{{"id", "cap-1-abcd"}, {"failed_ranks", failures.size()}};
  };
}

}  // namespace

TEST_CASE("two ranks with different node offsets line up on the collector clock") {
  testing::TempDir dir;
  // Both ranks ran step 8 at the same true instant; n1's clock reads 5 ms (5000 us) early.
  const double trueUs = 1.7e15;
  testing::gzipJson(dir.sub("rank-0.json.gz"), testing::rankTrace(0, trueUs, 8, 3));
  testing::gzipJson(dir.sub("rank-2.json.gz"), testing::rankTrace(2, trueUs - 5000.0, 8, 3));
  std::vector<RankFile> files = {
      {0, "n0", 0, dir.sub("rank-0.json.gz")},
      {2, "n1", testing::kN1OffsetNs, dir.sub("rank-2.json.gz")},
  };
  std::map<uint32_t, std::string> failures{{99, "sentinel"}};
  auto out = mergeTrace(files, describeAs(&failures), dir.sub("trace.json.gz"));
  REQUIRE(out);
  CHECK(out->failures.empty());
  CHECK(failures.empty());
  CHECK(out->bytes > 0);
  CHECK(out->events == uint64_t{2} * (6 + 2));  // 6 events and 2 metadata events per rank

  json doc = readMerged(dir.sub("trace.json.gz"));
  CHECK(doc["trainscope"]["id"] == "cap-1-abcd");
  const auto& events = doc["traceEvents"];
  REQUIRE(events.size() == 16);
  std::map<uint32_t, std::string> names;
  std::map<uint32_t, int> sortIndex;
  std::map<uint32_t, std::vector<double>> stepTs;
  size_t ops = 0;
  for (const auto& e : events) {
    const uint32_t pid = e["pid"].get<uint32_t>();
    if (e["ph"] == "M" && e["name"] == "process_name") names[pid] = e["args"]["name"];
    if (e["ph"] == "M" && e["name"] == "process_sort_index")
      sortIndex[pid] = e["args"]["sort_index"];
    if (e.value("cat", "") == "step") stepTs[pid].push_back(e["ts"].get<double>());
    if (e.value("cat", "") == "op") ++ops;
  }
  CHECK(names[0] == "rank 0 (n0)");
  CHECK(names[2] == "rank 2 (n1)");
  CHECK(sortIndex[0] == 0);
  CHECK(sortIndex[2] == 2);
  CHECK(ops == 6);
  REQUIRE(stepTs[0].size() == 3);
  REQUIRE(stepTs[2].size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(stepTs[0][i] == Approx(trueUs + i * 1000.0).epsilon(0).margin(0.01));
    CHECK(stepTs[2][i] == Approx(stepTs[0][i]).epsilon(0).margin(0.01));
  }
}

TEST_CASE("a rank file that is not gzip JSON is reported and left out") {
  testing::TempDir dir;
  testing::gzipJson(dir.sub("rank-0.json.gz"), testing::rankTrace(0, 1000.0, 1, 2));
  std::ofstream(dir.sub("rank-1.json.gz")) << "not gzip at all";
  testing::gzipJson(dir.sub("rank-3.json.gz"), json{{"no", "events"}});
  std::vector<RankFile> files = {{0, "n0", 0, dir.sub("rank-0.json.gz")},
                                 {1, "n0", 0, dir.sub("rank-1.json.gz")},
                                 {3, "n1", 0, dir.sub("rank-3.json.gz")}};
  std::map<uint32_t, std::string> failures;
  auto out = mergeTrace(files, describeAs(&failures), dir.sub("trace.json.gz"));
  REQUIRE(out);
  REQUIRE(out->failures.size() == 2);
  CHECK(out->failures.count(1) == 1);
  CHECK_THAT(out->failures.at(3), Catch::Matchers::Contains("no traceEvents list"));
  CHECK(failures.size() == 2);
  json doc = readMerged(dir.sub("trace.json.gz"));
  CHECK(doc["trainscope"]["failed_ranks"] == 2);
  for (const auto& e : doc["traceEvents"]) CHECK(e["pid"] == 0);
}

TEST_CASE("stacks files merge into one list of ranks with their threads") {
  testing::TempDir dir;
  json threads = json::array(
      {{{"tid", 1}, {"name", "python3"}, {"native", json::array()}, {"python", json::array()}}});
  testing::gzipJson(dir.sub("rank-1.json.gz"),
                    {{"trainscope", {{"kind", "stacks"}, {"rank", 1}}}, {"threads", threads}});
  testing::gzipJson(dir.sub("rank-2.json.gz"),
                    {{"trainscope", {{"kind", "stacks"}, {"rank", 2}}}, {"threads", threads}});
  std::map<uint32_t, std::string> failures;
  auto out = mergeStacks(
      {{1, "n0", 0, dir.sub("rank-1.json.gz")}, {2, "n1", 77, dir.sub("rank-2.json.gz")}},
      describeAs(&failures), dir.sub("trace.json.gz"));
  REQUIRE(out);
  json doc = readMerged(dir.sub("trace.json.gz"));
  CHECK(doc["kind"] == "stacks");
  CHECK(doc["capture"]["id"] == "cap-1-abcd");
  REQUIRE(doc["ranks"].size() == 2);
  CHECK(doc["ranks"][0]["rank"] == 1);
  CHECK(doc["ranks"][1]["node"] == "n1");
  CHECK(doc["ranks"][1]["threads"][0]["name"] == "python3");
}

TEST_CASE("an output that cannot be written fails the merge") {
  testing::TempDir dir;
  std::map<uint32_t, std::string> failures;
  auto out = mergeTrace({}, describeAs(&failures), dir.sub("missing/dir/trace.json.gz"));
  CHECK_FALSE(out);
}

TEST_CASE("a rank file nested 100,000 deep fails its rank with the reason, the others merge") {
  // One event's args held a value nested 100,000 levels deep: the merge dumped it and the
  // collector died, again at every restart.
  testing::TempDir dir;
  testing::gzipJson(dir.sub("rank-0.json.gz"), testing::rankTrace(0, 1000.0, 1, 2));
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  testing::gzipText(dir.sub("rank-1.json.gz"),
                    R"({"traceEvents":[{"name":"x","ph":"i","ts":1,"args":{"v":)" + deep + "}}]}");
  testing::gzipText(dir.sub("rank-2.json.gz"), R"({"threads":[{"tid":1,"v":)" + deep + "}]}");
  std::map<uint32_t, std::string> failures;
  auto out =
      mergeTrace({{0, "n0", 0, dir.sub("rank-0.json.gz")}, {1, "n0", 0, dir.sub("rank-1.json.gz")}},
                 describeAs(&failures), dir.sub("trace.json.gz"));
  REQUIRE(out);
  REQUIRE(out->failures.size() == 1);
  CHECK(out->failures.at(1) == "the file of rank 1: nested deeper than 512 levels");
  json doc = readMerged(dir.sub("trace.json.gz"));
  for (const auto& e : doc["traceEvents"]) CHECK(e["pid"] == 0);

  auto stacks = mergeStacks({{2, "n0", 0, dir.sub("rank-2.json.gz")}}, describeAs(&failures),
                            dir.sub("stacks.json.gz"));
  REQUIRE(stacks);
  CHECK(stacks->failures.at(2) == "the file of rank 2: nested deeper than 512 levels");
}

TEST_CASE("the merge holds one event at a time: an event past the bound fails its rank") {
  testing::TempDir dir;
  json big = testing::rankTrace(0, 1000.0, 1, 3);
  big["traceEvents"][1]["args"] = {{"blob", std::string(3u << 20, 'b')}};
  testing::gzipJson(dir.sub("rank-0.json.gz"), big);
  MergeOptions options;
  options.rankFile.maxRatio = 1u << 20;  // the blob compresses ~1,000x: not a bomb here
  options.entries.maxEntryBytes = 2u << 20;
  std::map<uint32_t, std::string> failures;
  auto out = mergeTrace({{0, "n0", 0, dir.sub("rank-0.json.gz")}}, describeAs(&failures),
                        dir.sub("trace.json.gz"), options);
  REQUIRE(out);
  CHECK(out->failures.at(0) ==
        "the file of rank 0: an entry of \"traceEvents\" takes more than 2 MiB");
  options.entries.maxEntryBytes = 4u << 20;
  out = mergeTrace({{0, "n0", 0, dir.sub("rank-0.json.gz")}}, describeAs(&failures),
                   dir.sub("trace.json.gz"), options);
  REQUIRE(out);
  CHECK(out->failures.empty());
  CHECK(out->events == 6 + 2);
}

TEST_CASE("a rank file that breaks off halfway leaves none of its events in the merge") {
  testing::TempDir dir;
  std::string text = testing::rankTrace(0, 1000.0, 1, 50).dump();
  testing::gzipText(dir.sub("rank-0.json.gz"), text.substr(0, text.size() / 2));
  testing::gzipText(dir.sub("rank-1.json.gz"), R"({"traceEvents":[],"traceEvents":[]})");
  testing::gzipText(dir.sub("rank-2.json.gz"), R"({"traceEvents":{}})");
  testing::gzipText(dir.sub("rank-3.json.gz"), R"([{"traceEvents":[]}])");
  testing::gzipJson(dir.sub("rank-4.json.gz"), testing::rankTrace(4, 1000.0, 1, 1));
  std::vector<RankFile> files;
  for (uint32_t r = 0; r <= 4; ++r) {
    files.push_back({r, "n0", 0, dir.sub("rank-" + std::to_string(r) + ".json.gz")});
  }
  std::map<uint32_t, std::string> failures;
  auto out = mergeTrace(files, describeAs(&failures), dir.sub("trace.json.gz"));
  REQUIRE(out);
  REQUIRE(out->failures.size() == 4);
  CHECK_THAT(out->failures.at(0),
             Catch::Matchers::StartsWith("the file of rank 0: not valid JSON"));
  CHECK(out->failures.at(1) == "the file of rank 1: \"traceEvents\" appears twice");
  CHECK(out->failures.at(2) == "the file of rank 2: \"traceEvents\" is not a list");
  CHECK(out->failures.at(3) == "the file of rank 3: not a JSON object");
  json doc = readMerged(dir.sub("trace.json.gz"));
  CHECK(doc["traceEvents"].size() == 2 + 2);
  for (const auto& e : doc["traceEvents"]) CHECK(e["pid"] == 4);
}
