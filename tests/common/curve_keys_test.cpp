// CurveZMQ key files (common/curve_keys.h): what `trainscope keygen` writes reads back, and
// every file the agent or the collector cannot trust is refused with a message naming it.
// Exits 77 (skipped) when this libzmq has no CURVE.
#include <zmq.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <sys/stat.h>
#include <catch2/catch.hpp>

#include "common/curve_keys.h"
#include "tests/common/support.h"

using namespace trainscope;
using trainscope::tests::TempDir;

namespace {

void requireCurve() {
  if (zmq_has("curve") == 0) {
    WARN("libzmq without CURVE: skipped");
    std::exit(77);
  }
}

unsigned modeOf(const std::string& path) {
  struct stat sb {};
  REQUIRE(::stat(path.c_str(), &sb) == 0);
  return sb.st_mode & 0777;
}

std::string readAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

CurveKeyPair writePair(const TempDir& dir, const std::string& name) {
  auto keys = generateCurveKeyPair();
  REQUIRE(keys.isOk());
  REQUIRE(writeCurveKeyFiles(dir.path(), name, *keys, false).isOk());
  return *keys;
}

}  // namespace

TEST_CASE("curve keys: written pairs read back, the secret file 0600 whatever the umask") {
  requireCurve();
  TempDir dir;
  const mode_t old = ::umask(0);
  const CurveKeyPair keys = writePair(dir, "node0");
  ::umask(old);
  CHECK(keys.publicKey.size() == 40);
  CHECK(keys.secretKey.size() == 40);
  CHECK(keys.publicKey != keys.secretKey);
  CHECK(modeOf(dir.sub("node0.key")) == 0600);
  CHECK(modeOf(dir.sub("node0.pub")) == 0644);
  CHECK(contains(readAll(dir.sub("node0.pub")), keys.publicKey));
  CHECK_FALSE(contains(readAll(dir.sub("node0.pub")), keys.secretKey));

  auto pair = readCurveSecretFile(dir.sub("node0.key"));
  REQUIRE(pair.isOk());
  CHECK(pair->publicKey == keys.publicKey);
  CHECK(pair->secretKey == keys.secretKey);
  auto pub = readCurvePublicFile(dir.sub("node0.pub"));
  REQUIRE(pub.isOk());
  CHECK(*pub == keys.publicKey);
  // The secret file carries the public key too, and a bare key (one word) reads as well.
  CHECK(readCurvePublicFile(dir.sub("node0.key")).isOk());
  dir.write("bare.pub", keys.publicKey + "\n");
  auto bare = readCurvePublicFile(dir.sub("bare.pub"));
  REQUIRE(bare.isOk());
  CHECK(*bare == keys.publicKey);

  // Z85 text of the 32 bytes ZAP hands over.
  uint8_t binary[32];
  REQUIRE(zmq_z85_decode(binary, keys.publicKey.c_str()) != nullptr);
  CHECK(curveKeyText(std::string(reinterpret_cast<char*>(binary), 32)) == keys.publicKey);
  CHECK(curveKeyText("short").empty());
}

TEST_CASE("curve keys: existing files are kept unless overwrite is asked for") {
  requireCurve();
  TempDir dir;
  const CurveKeyPair first = writePair(dir, "n");
  auto second = generateCurveKeyPair();
  REQUIRE(second.isOk());
  Status st = writeCurveKeyFiles(dir.path(), "n", *second, false);
  REQUIRE_FALSE(st.isOk());
  CHECK(contains(st.message(), dir.sub("n.key")));
  CHECK(contains(st.message(), "--force"));
  CHECK(readCurveSecretFile(dir.sub("n.key"))->secretKey == first.secretKey);

  ::chmod(dir.sub("n.key").c_str(), 0644);  // replaced files get their mode back too
  REQUIRE(writeCurveKeyFiles(dir.path(), "n", *second, true).isOk());
  CHECK(modeOf(dir.sub("n.key")) == 0600);
  CHECK(readCurveSecretFile(dir.sub("n.key"))->secretKey == second->secretKey);
  CHECK(*readCurvePublicFile(dir.sub("n.pub")) == second->publicKey);

  // A symlink planted where a key goes is not followed.
  std::filesystem::create_symlink(dir.sub("elsewhere"), dir.sub("s.key"));
  CHECK_FALSE(writeCurveKeyFiles(dir.path(), "s", *second, true).isOk());
  CHECK_FALSE(std::filesystem::exists(dir.sub("elsewhere")));
}

TEST_CASE("curve keys: missing, unreadable, readable-by-others and malformed files are refused") {
  requireCurve();
  TempDir dir;
  const CurveKeyPair keys = writePair(dir, "good");

  auto missing = readCurveSecretFile(dir.sub("nope.key"));
  REQUIRE_FALSE(missing.isOk());
  CHECK(contains(missing.message(), dir.sub("nope.key")));
  CHECK(contains(missing.message(), "No such file"));
  CHECK_FALSE(readCurvePublicFile(dir.sub("nope.pub")).isOk());

  // Not a regular file: a directory, and a FIFO (which must not block the reader).
  std::filesystem::create_directory(dir.sub("dir.key"));
  CHECK(contains(readCurveSecretFile(dir.sub("dir.key")).message(), "not a key file"));
  REQUIRE(::mkfifo(dir.sub("fifo.key").c_str(), 0600) == 0);
  CHECK(contains(readCurveSecretFile(dir.sub("fifo.key")).message(), "not a key file"));

  // A secret other users can read.
  for (mode_t mode : {0640, 0604, 0644}) {
    ::chmod(dir.sub("good.key").c_str(), mode);
    auto open = readCurveSecretFile(dir.sub("good.key"));
    REQUIRE_FALSE(open.isOk());
    CHECK(contains(open.message(), "other users can read"));
    CHECK(contains(open.message(), "chmod 600"));
  }
  ::chmod(dir.sub("good.key").c_str(), 0400);
  CHECK(readCurveSecretFile(dir.sub("good.key")).isOk());

  // Malformed contents.
  auto secretFile = [&](const std::string& name, const std::string& text) {
    dir.write(name, text);
    ::chmod(dir.sub(name).c_str(), 0600);
    return readCurveSecretFile(dir.sub(name));
  };
  CHECK(contains(secretFile("empty.key", "").message(), "no secret-key"));
  CHECK(contains(secretFile("short.key", "curve\n    secret-key = \"abc\"\n").message(),
                 "no secret-key"));
  // 40 characters, but not Z85 (the quote and space are outside its alphabet).
  CHECK_FALSE(secretFile("notz85.key", "secret-key = \"" + std::string(39, '~') + ",\"\n").isOk());
  // A public key that belongs to another secret.
  auto other = generateCurveKeyPair();
  REQUIRE(other.isOk());
  auto mixed = secretFile("mixed.key", "curve\n    public-key = \"" + other->publicKey +
                                           "\"\n    secret-key = \"" + keys.secretKey + "\"\n");
  REQUIRE_FALSE(mixed.isOk());
  CHECK(contains(mixed.message(), "does not belong"));
  // Only the secret key: the public one is derived.
  auto derived = secretFile("only.key", "secret-key = \"" + keys.secretKey + "\"\n");
  REQUIRE(derived.isOk());
  CHECK(derived->publicKey == keys.publicKey);

  dir.write("bad.pub", "public-key = \"tooshort\"\n");
  auto badPub = readCurvePublicFile(dir.sub("bad.pub"));
  REQUIRE_FALSE(badPub.isOk());
  CHECK(contains(badPub.message(), dir.sub("bad.pub")));
  CHECK(contains(badPub.message(), "no public-key"));
}

TEST_CASE("curve keys: the collector's directory maps each allowed key to its node") {
  requireCurve();
  TempDir dir;
  const std::string keys = dir.sub("keys");
  std::filesystem::create_directories(keys + "/agents");

  auto noServer = readCurveServerKeys(keys);
  REQUIRE_FALSE(noServer.isOk());
  CHECK(contains(noServer.message(), keys + "/server.key"));

  auto server = generateCurveKeyPair();
  REQUIRE(server.isOk());
  REQUIRE(writeCurveKeyFiles(keys, "server", *server, false).isOk());
  auto noAgents = readCurveServerKeys(keys);
  REQUIRE_FALSE(noAgents.isOk());
  CHECK(contains(noAgents.message(), "no <node>.pub"));

  TempDir nodes;
  const CurveKeyPair a = writePair(nodes, "node-a");
  const CurveKeyPair b = writePair(nodes, "node-b");
  std::filesystem::copy_file(nodes.sub("node-a.pub"), keys + "/agents/node-a.pub");
  std::filesystem::copy_file(nodes.sub("node-b.pub"), keys + "/agents/node-b.pub");
  dir.write("keys/agents/README", "not a key: ignored\n");
  auto ok = readCurveServerKeys(keys);
  REQUIRE(ok.isOk());
  CHECK(ok->server.secretKey == server->secretKey);
  REQUIRE(ok->agents.size() == 2);
  CHECK(ok->agents.at(a.publicKey) == "node-a");
  CHECK(ok->agents.at(b.publicKey) == "node-b");
  CHECK(ok->agents.count(server->publicKey) == 0);

  // One key under two names could speak for both: refused.
  std::filesystem::copy_file(nodes.sub("node-a.pub"), keys + "/agents/node-c.pub");
  auto twice = readCurveServerKeys(keys);
  REQUIRE_FALSE(twice.isOk());
  CHECK(contains(twice.message(), "the same key as"));
  std::filesystem::remove(keys + "/agents/node-c.pub");

  // A bad allow-list entry names its file rather than being skipped.
  dir.write("keys/agents/broken.pub", "public-key = \"x\"\n");
  auto broken = readCurveServerKeys(keys);
  REQUIRE_FALSE(broken.isOk());
  CHECK(contains(broken.message(), "agents/broken.pub"));
  std::filesystem::remove(keys + "/agents/broken.pub");

  // The server's secret readable by others.
  ::chmod((keys + "/server.key").c_str(), 0644);
  CHECK(contains(readCurveServerKeys(keys).message(), "chmod 600"));
}
