// CurveZMQ keys between agents and the collector: generating key pairs, and reading them from
// the files `trainscope keygen` writes. Z85 text (40 characters per 32-byte key), in the
// layout of ZeroMQ's own certificates (czmq zcert), so keys made by other ZeroMQ tools read
// too:
//   NAME.key (mode 0600)   curve / public-key = "..." / secret-key = "..."
//   NAME.pub (mode 0644)   curve / public-key = "..."
// The collector's --curve-keys DIR holds server.key and agents/<node>.pub: the allow-list, one
// public key per node, the file's name being the node that key may speak for.
// Pure apart from the files named; any thread.
#pragma once

#include <map>
#include <string>

#include "common/status.h"

namespace trainscope {

struct CurveKeyPair {
  std::string publicKey;  // Z85, 40 characters
  std::string secretKey;  // Z85, 40 characters; empty for a public key alone
};

// Ok when libzmq can do CURVE; otherwise an error that says so, naming `what` (a flag).
Status curveAvailable(const std::string& what);

// A new key pair (zmq_curve_keypair).
Result<CurveKeyPair> generateCurveKeyPair();

// Writes DIR/NAME.key (0600) and DIR/NAME.pub (0644); refuses to replace either unless
// `overwrite`.
Status writeCurveKeyFiles(const std::string& dir, const std::string& name, const CurveKeyPair& keys,
                          bool overwrite);

// A key pair from a .key file. Refused when the file can be read by other users (mode & 077)
// or its public key does not belong to its secret key.
Result<CurveKeyPair> readCurveSecretFile(const std::string& path);
// The public key of a .pub (or .key) file; a file holding just the 40 characters reads too.
Result<std::string> readCurvePublicFile(const std::string& path);

// The collector's key directory: DIR/server.key, and every DIR/agents/*.pub as public key ->
// node name (the file name without .pub). Fails naming the file at fault, and when no agent
// key is there (nobody could connect).
struct CurveServerKeys {
  CurveKeyPair server;
  std::map<std::string, std::string> agents;  // Z85 public key -> node
};
Result<CurveServerKeys> readCurveServerKeys(const std::string& dir);

// The Z85 text of a 32-byte binary key (as ZAP passes them); "" when `binary` is not 32 bytes.
std::string curveKeyText(const std::string& binary);

}  // namespace trainscope
