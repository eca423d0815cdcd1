// `--config FILE` (common/config_file.h): the file's grammar with errors naming FILE:LINE, the
// file filling what the command line leaves unset, values checked like flags, and the
// installed-layout helpers the daemons use to find their files (common/install_layout.h).
#include "common/config_file.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <catch2/catch.hpp>

#include "common/install_layout.h"

using namespace trainscope;

namespace {

struct Parsed {
  int rc = 0;
  std::string err;
  std::string spool;
  int port = 0;
  bool sync = false;
};

// A small app like the daemons' mains, parsed with `args` and a config file holding `text`.
Parsed parse(std::vector<std::string> args, const std::string& text) {
  const std::string path = "/tmp/ts-config-test-" + std::to_string(::getpid()) + ".conf";
  {
    std::ofstream f(path);
    f << text;
  }
  CLI::App app{"test", "test-daemon"};
  Parsed p;
  p.spool = "/default";
  app.add_option("--spool-dir", p.spool);
  app.add_option("--port", p.port)->check(CLI::Range(1, 65535));
  app.add_flag("--sync", p.sync);
  std::vector<std::string> argv{"test-daemon", "--config", path};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<const char*> cargv;
  cargv.reserve(argv.size());
  for (auto& a : argv) cargv.push_back(a.c_str());
  std::ostringstream out;
  std::ostringstream err;
  p.rc = parseWithConfigFile(app, static_cast<int>(cargv.size()), cargv.data(), out, err);
  p.err = err.str();
  std::remove(path.c_str());
  return p;
}

}  // namespace

TEST_CASE("config file: name = value lines, comments, quotes") {
  auto r = parseConfigText(
      "# comment\n\nspool-dir = /var/lib/x   # trailing\nname = \"a # b \\\" c\"\n", "f.conf");
  REQUIRE(r);
  REQUIRE(r->size() == 2);
  CHECK((*r)[0].name == "spool-dir");
  CHECK((*r)[0].value == "/var/lib/x");
  CHECK((*r)[0].line == 3);
  CHECK((*r)[1].value == "a # b \" c");
}

TEST_CASE("config file: bad lines name the file and line") {
  auto noEq = parseConfigText("ok = 1\nspool-dir /x\n", "a.conf");
  REQUIRE(!noEq);
  CHECK(noEq.message().find("a.conf:2:") == 0);
  auto section = parseConfigText("[agent]\n", "a.conf");
  REQUIRE(!section);
  CHECK(section.message().find("sections") != std::string::npos);
  auto twice = parseConfigText("port = 1\nport = 2\n", "a.conf");
  REQUIRE(!twice);
  CHECK(twice.message().find("already set on line 1") != std::string::npos);
  auto quote = parseConfigText("name = \"open\n", "a.conf");
  REQUIRE(!quote);
  CHECK(quote.message().find("closing") != std::string::npos);
  auto badName = parseConfigText("--port = 1\n", "a.conf");
  REQUIRE(!badName);
}

TEST_CASE("config file: fills what the command line leaves unset; the command line wins") {
  auto p = parse({}, "spool-dir = /from/file\nport = 7601\nsync = true\n");
  INFO(p.err);
  CHECK(p.rc == -1);
  CHECK(p.spool == "/from/file");
  CHECK(p.port == 7601);
  CHECK(p.sync);
  p = parse({"--spool-dir", "/from/flag"}, "spool-dir = /from/file\n");
  CHECK(p.rc == -1);
  CHECK(p.spool == "/from/flag");
}

TEST_CASE("config file: unknown settings and bad values are errors naming FILE:LINE") {
  auto p = parse({}, "spool = /x\n");
  CHECK(p.rc == 2);
  CHECK(p.err.find(":1: unknown setting 'spool'") != std::string::npos);
  p = parse({}, "\nport = 70000\n");
  CHECK(p.rc == 2);
  CHECK(p.err.find(":2: port") != std::string::npos);
  CLI::App app{"test", "test-daemon"};
  std::vector<const char*> argv{"test-daemon", "--config", "/nonexistent/ts.conf"};
  std::ostringstream out;
  std::ostringstream err;
  CHECK(parseWithConfigFile(app, 3, argv.data(), out, err) == 2);
  CHECK(err.str().find("cannot read '/nonexistent/ts.conf'") != std::string::npos);
}

TEST_CASE("install layout: the prefix from the executable's path, candidates best first") {
  CHECK(prefixOf("/opt/ts/bin", "bin") == "/opt/ts");
  CHECK(prefixOf("/stage/usr/local/bin/", "bin") == "/stage/usr/local");
  CHECK(prefixOf("/opt/ts/sbin", "bin").empty());
  CHECK(prefixOf("/opt/ts/bin", "/usr/bin").empty());
  CHECK(isInside("/work/build/tools", "/work/build"));
  CHECK(!isInside("/work/build-release", "/work/build"));
  CHECK(underPrefix("/opt/ts", "share/x") == "/opt/ts/share/x");
  CHECK(underPrefix("/opt/ts", "/etc/x") == "/etc/x");
  CHECK(installedCandidates("/stage/usr/bin", "bin", "/usr", "share/trainscope/web") ==
        std::vector<std::string>{"/stage/usr/share/trainscope/web", "/usr/share/trainscope/web"});
  CHECK(installedCandidates("/usr/bin", "bin", "/usr", "lib", "libx.so") ==
        std::vector<std::string>{"/usr/lib/libx.so"});
}
