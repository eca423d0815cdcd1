// wire::splitBatch and wire::stepItem (schema/wire.h), the collector's fast path: a frame they
// take apart must be one decode() accepts with the same seq and items, and everything else
// (other bodies, versions, unknown or repeated fields, cut frames) must be left to decode().
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>

#include "schema/wire.h"

using namespace trainscope;

namespace {

wire::StepReport report(uint32_t rank, int64_t step) {
  wire::StepReport r;
  r.set_job("job");
  r.set_rank(rank);
  r.set_step(step);
  r.set_start_ns(1'000'000'000 + step);
  r.set_end_ns(r.start_ns() + 10);
  r.set_duration_ns(10);
  auto* op = r.add_ops();
  op->set_name("aten::mm");
  op->set_total_ns(5);
  auto* c = r.add_collectives();
  c->set_op(wire::ALL_REDUCE);
  c->set_group("dp");
  return r;
}

// A batch of two step reports (one with its own schema version, one without) and a hello.
wire::Envelope mixedBatch() {
  wire::Envelope env;
  auto* b = env.mutable_batch();
  b->set_seq(42);
  auto* first = b->add_items();
  first->set_schema_version(wire::kSchemaVersion);
  *first->mutable_step() = report(0, 7);
  *b->add_items()->mutable_step() = report(1, 7);
  auto* hello = b->add_items()->mutable_rank_hello()->mutable_rank();
  hello->set_job("job");
  hello->set_world_size(2);
  return env;
}

void putVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

}  // namespace

TEST_CASE("splitBatch gives an agent's batch frame's seq and items; stepItem the reports' bytes") {
  wire::Envelope env = mixedBatch();
  const std::string frame = wire::encode(env);
  wire::BatchFrame split;
  REQUIRE(wire::splitBatch(frame.data(), frame.size(), &split));
  CHECK(split.seq == 42);
  REQUIRE(split.items.size() == 3);
  for (int i = 0; i < 3; ++i) CHECK(split.items[i] == env.batch().items(i).SerializeAsString());

  uint32_t version = 99;
  std::string_view bytes;
  REQUIRE(wire::stepItem(split.items[0], &version, &bytes));
  CHECK(version == wire::kSchemaVersion);
  wire::StepReport parsed;
  REQUIRE(parsed.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())));
  CHECK(parsed.SerializeAsString() == report(0, 7).SerializeAsString());
  REQUIRE(wire::stepItem(split.items[1], &version, &bytes));
  CHECK(version == 0);
  CHECK(bytes == report(1, 7).SerializeAsString());
  CHECK_FALSE(wire::stepItem(split.items[2], &version, &bytes));  // a hello

  // What encodeBatchFrame builds from encoded items (as the agent sends its spool) splits back.
  std::vector<std::string> encoded;
  for (const auto& item : env.batch().items()) encoded.push_back(item.SerializeAsString());
  const std::string built = wire::encodeBatchFrame(42, encoded);
  CHECK(built == frame);
  REQUIRE(wire::splitBatch(built.data(), built.size(), &split));
  CHECK(split.items.size() == 3);

  // The split vector is reused: a second frame replaces the first's items.
  wire::Envelope one;
  one.mutable_batch()->set_seq(43);
  *one.mutable_batch()->add_items()->mutable_step() = report(0, 8);
  const std::string second = wire::encode(one);
  REQUIRE(wire::splitBatch(second.data(), second.size(), &split));
  CHECK(split.seq == 43);
  CHECK(split.items.size() == 1);
}

TEST_CASE("splitBatch leaves every other frame to decode()") {
  wire::BatchFrame split;
  auto splits = [&](const std::string& frame) {
    return wire::splitBatch(frame.data(), frame.size(), &split);
  };
  wire::Envelope heartbeat;
  heartbeat.mutable_heartbeat()->set_node("n");
  CHECK_FALSE(splits(wire::encode(heartbeat)));

  wire::Envelope env = mixedBatch();
  std::string foreign;
  env.set_schema_version(2);
  env.SerializeToString(&foreign);
  CHECK_FALSE(splits(foreign));  // decode() says "version"
  env.clear_schema_version();
  std::string unversioned;
  env.SerializeToString(&unversioned);
  CHECK_FALSE(splits(unversioned));

  wire::Envelope empty;
  CHECK_FALSE(splits(wire::encode(empty)));  // decode() says "empty"

  const std::string frame = wire::encode(env);
  CHECK_FALSE(splits(frame + "\x08\x01"));      // schema_version twice
  CHECK_FALSE(splits(frame + "\xa8\x06\x01"));  // an unknown field (101)
  std::string bigger = frame;
  bigger.resize(wire::kMaxFrameBytes + 1, '\0');
  CHECK_FALSE(splits(bigger));  // decode() says "oversized"

  // An unknown field inside the Batch.
  std::string batch = env.batch().SerializeAsString() + "\x18\x05";
  std::string withUnknown = "\x08\x01";
  putVarint(withUnknown, (17 << 3) | 2);
  putVarint(withUnknown, batch.size());
  withUnknown += batch;
  CHECK_FALSE(splits(withUnknown));

  // Every cut of a valid frame: split only where decode() accepts, with the same items.
  for (size_t cut = 0; cut < frame.size(); ++cut) {
    const bool split1 = wire::splitBatch(frame.data(), cut, &split);
    auto decoded = wire::decode(frame.data(), cut);
    if (split1) {
      INFO("cut at " << cut);
      REQUIRE(decoded.isOk());
      CHECK(split.items.size() == static_cast<size_t>(decoded->batch().items_size()));
    }
  }
}

TEST_CASE("stepItem takes only an item that is a step report and nothing else") {
  uint32_t version = 0;
  std::string_view bytes;
  wire::Envelope item;
  *item.mutable_step() = report(0, 1);
  item.set_schema_version(99);  // taken apart; ingest rejects the version by reason
  std::string encoded = item.SerializeAsString();
  REQUIRE(wire::stepItem(encoded, &version, &bytes));
  CHECK(version == 99);

  // A step then another body: protobuf keeps the last, so this is not a step item.
  std::string twoBodies = encoded;
  wire::Envelope host;
  host.mutable_host()->set_node("n");
  twoBodies += host.SerializeAsString();
  CHECK_FALSE(wire::stepItem(twoBodies, &version, &bytes));
  // Two step fields merge in protobuf; left to the Envelope decode.
  CHECK_FALSE(wire::stepItem(encoded + encoded.substr(2), &version, &bytes));
  // A version past 32 bits.
  std::string wide;
  wide.push_back('\x08');
  putVarint(wide, uint64_t{1} << 40);
  CHECK_FALSE(wire::stepItem(wide + encoded.substr(2), &version, &bytes));
  // A cut item, and no item at all.
  CHECK_FALSE(
      wire::stepItem(std::string_view(encoded).substr(0, encoded.size() - 1), &version, &bytes));
  CHECK_FALSE(wire::stepItem({}, &version, &bytes));
}
