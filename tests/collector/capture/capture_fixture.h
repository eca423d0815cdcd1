// Shared set-up for the capture tests: a temporary directory, an in-memory SQLite store seeded
// with one job (seed_job.h), gzip rank files and file chunks. Test-only; single-threaded use.
#pragma once

#include <zlib.h>

#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "collector/capture/gzip_file.h"
#include "collector/storage/store.h"
#include "schema/wire.h"
#include "tests/collector/capture/seed_job.h"
#include "tests/common/support.h"

namespace trainscope::testing {

// Reused from the agent tests: a directory removed with its content when the test ends.
using TempDir = tests::TempDir;

// A job "j" of world size 4: ranks 0, 1 on n0 and 2, 3 on n1, each at step `latest`.
inline std::unique_ptr<storage::Store> seededStore(int64_t latest = 10, uint32_t ranks = 4) {
  auto store = openSeededStore(latest, ranks);
  REQUIRE(store);
  return std::move(store.value());
}

// Writes `text` as a gzip file and returns its bytes.
inline std::string gzipText(const std::string& path, const std::string& text) {
  capture::GzipWriter w;
  REQUIRE(w.open(path));
  w.write(text);
  REQUIRE(w.close());
  auto bytes = capture::readFileBytes(path);
  REQUIRE(bytes);
  return *bytes;
}

// Writes `doc` as a gzip JSON file and returns its bytes.
inline std::string gzipJson(const std::string& path, const nlohmann::json& doc) {
  capture::GzipWriter w;
  REQUIRE(w.open(path));
  w.write(doc.dump());
  REQUIRE(w.close());
  auto bytes = capture::readFileBytes(path);
  REQUIRE(bytes);
  return *bytes;
}

// A rank's trace file as the probe writes it: one step event and one op event per step.
inline nlohmann::json rankTrace(uint32_t rank, double baseUs, int64_t firstStep, int steps) {
  nlohmann::json events = nlohmann::json::array();
  for (int i = 0; i < steps; ++i) {
    const double ts = baseUs + i * 1000.0;
    events.push_back({{"name", "ProfilerStep#" + std::to_string(firstStep + i)},
                      {"ph", "X"},
                      {"cat", "step"},
                      {"ts", ts},
                      {"dur", 900.0},
                      {"pid", 99},
                      {"tid", 0},
                      {"args", {{"step", firstStep + i}}}});
    events.push_back({{"name", "aten::mm"},
                      {"ph", "X"},
                      {"cat", "op"},
                      {"ts", ts + 10.0},
                      {"dur", 100.0},
                      {"pid", 99},
                      {"tid", 1},
                      {"args", {{"step", firstStep + i}}}});
  }
  return {{"traceEvents", events},
          {"trainscope",
           {{"kind", "trace"},
            {"rank", rank},
            {"first_step", firstStep},
            {"last_step", firstStep + steps - 1},
            {"truncated", false}}}};
}

// File chunks of `bytes` for capture `id`, rank `rank`, `size` bytes each.
inline std::vector<wire::Envelope> chunksOf(const std::string& id, uint32_t rank,
                                            const std::string& bytes, size_t size) {
  std::vector<wire::Envelope> out;
  for (size_t off = 0; off < bytes.size(); off += size) {
    wire::Envelope env;
    auto* c = env.mutable_file_chunk();
    c->set_command_id(id);
    c->set_job("j");
    c->set_rank(rank);
    c->set_offset(off);
    const std::string data = bytes.substr(off, size);
    c->set_data(data);
    c->set_crc32(static_cast<uint32_t>(
        crc32(0L, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size()))));
    c->set_last(off + size >= bytes.size());
    if (c->last()) c->set_total_bytes(bytes.size());
    out.push_back(env);
  }
  return out;
}

inline wire::Envelope statusOf(const std::string& id, uint32_t rank, const std::string& state,
                               const std::string& detail = "") {
  wire::Envelope env;
  auto* s = env.mutable_command_status();
  s->set_command_id(id);
  s->set_job("j");
  s->set_rank(rank);
  s->set_state(state);
  s->set_detail(detail);
  if (state == "uploading") {
    s->set_first_step(8);
    s->set_last_step(14);
  }
  return env;
}

}  // namespace trainscope::testing
