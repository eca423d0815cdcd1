// Test helpers for the importer: read a bundle's steps.pb back, and the generator's expected
// figures (tests/data/import/make_traces.py writes FILE.expected.json beside each trace).
#pragma once

#include <fcntl.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/util/delimited_message_util.h>
#include <nlohmann/json.hpp>

#include "schema/trainscope.pb.h"

namespace trainscope::importer::testing {

struct Bundle {
  std::vector<wire::RankInfo> ranks;
  std::vector<wire::StepReport> steps;
  std::vector<wire::RankGoodbye> goodbyes;
  bool ok = false;  // the file read to its end as length-delimited envelopes
};

inline Bundle readBundle(const std::string& stepsFile) {
  Bundle b;
  const int fd = ::open(stepsFile.c_str(), O_RDONLY);
  if (fd < 0) return b;
  google::protobuf::io::FileInputStream in(fd);
  in.SetCloseOnDelete(true);
  for (;;) {
    wire::Envelope env;
    bool clean = false;
    if (!google::protobuf::util::ParseDelimitedFromZeroCopyStream(&env, &in, &clean)) {
      b.ok = clean;
      return b;
    }
    if (env.has_rank_hello()) b.ranks.push_back(env.rank_hello().rank());
    if (env.has_step()) b.steps.push_back(env.step());
    if (env.has_rank_goodbye()) b.goodbyes.push_back(env.rank_goodbye());
  }
}

// The fixtures' directory (the test's environment names it).
inline std::string dataDir() {
  const char* d = std::getenv("TRAINSCOPE_IMPORT_DATA");
  return d != nullptr ? d : "tests/data/import";
}

inline nlohmann::json readJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, false);
}

}  // namespace trainscope::importer::testing
