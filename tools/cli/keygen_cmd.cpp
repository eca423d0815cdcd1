#include "tools/cli/keygen_cmd.h"

#include <unistd.h>

#include <memory>
#include <ostream>

#include "common/curve_keys.h"

namespace trainscope::cli {

int runKeygen(Context& ctx, const KeygenArgs& args) {
  std::string name = args.name;
  if (name.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') {
      ctx.err << "trainscope keygen: --name: not given and the hostname cannot be read\n";
      return kExitLocalError;
    }
    name = host;
  }
  if (name.find('/') != std::string::npos || name == "." || name == "..") {
    ctx.err << "trainscope keygen: --name: '" << name << "' must be a plain file name\n";
    return kExitUsage;
  }
  auto keys = generateCurveKeyPair();
  if (!keys) {
    ctx.err << "trainscope keygen: " << keys.message() << "\n";
    return kExitLocalError;
  }
  if (Status st = writeCurveKeyFiles(args.dir, name, *keys, args.force); !st) {
    ctx.err << "trainscope keygen: " << st.message() << "\n";
    return kExitLocalError;
  }
  const std::string base = args.dir + "/" + name;
  ctx.out << "wrote " << base << ".key (secret, mode 0600) and " << base << ".pub\n"
          << "public key " << keys->publicKey << "\n";
  if (name == "server") {
    ctx.out << "For the collector: keep " << base << ".key in its --curve-keys DIR, put each "
            << "agent's NODE.pub in DIR/agents/, and give " << name << ".pub to the agents "
            << "(their --collector-key)\n";
  } else {
    ctx.out << "For an agent: copy " << name << ".pub into the collector's --curve-keys "
            << "DIR/agents/ (its name is the node this key may speak for) and run\n"
            << "  trainscope-agent --node " << name << " --agent-key " << base
            << ".key --collector-key server.pub\n"
            << "(For the collector's own pair use --name server.)\n";
  }
  return kExitOk;
}

void addKeygenCommand(CLI::App& app, Action* action) {
  auto args = std::make_shared<KeygenArgs>();
  auto* sub = app.add_subcommand(
      "keygen",
      "Write a CurveZMQ key pair (ZeroMQ Z85 text) for encrypting and authenticating agents and "
      "the collector: NAME.key (secret, mode 0600) and NAME.pub. No collector needed");
  sub->add_option("--dir", args->dir, "Directory for the two files")->capture_default_str();
  sub->add_option("--name", args->name,
                  "File name without extension: the node name for an agent (the collector "
                  "allows agents/<node>.pub to speak only as <node>), server for the collector "
                  "[default: this host's name]");
  sub->add_flag("--force", args->force, "Replace existing files");
  sub->callback(
      [action, args] { *action = [args](Context& ctx) { return runKeygen(ctx, *args); }; });
}

}  // namespace trainscope::cli
