// The import routes of the JSON API (`trainscope import`, collector/ingest/import_receiver.h):
// open a session for a job, upload the bundle's files in chunks no larger than the request body
// limit, commit or abort. All of them change something, so with --http-token they need the
// bearer token. Served through HttpOptions::imports; without it they answer 503.
#include "collector/http/api.h"
#include "collector/http/request_target.h"
#include "collector/ingest/import_receiver.h"

namespace trainscope::http {
namespace {

using nlohmann::json;

ApiResponse fromReply(const ingest::ImportReply& reply) {
  if (!reply.status) {
    ApiResponse r = errorResponse(reply.status);
    if (!reply.body.is_null()) {
      // The body of a refused chunk says where to resume: keep it beside the error.
      json body = reply.body;
      body["error"] = reply.status.message();
      r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
    }
    return r;
  }
  return jsonResponse(reply.body, reply.created ? 201 : 200);
}

ApiResponse importsOff() {
  return errorResponse(503, "imports are off on this collector");
}

}  // namespace

ApiResponse Api::openImport(const std::string& job, std::string_view body) const {
  if (!options_.imports) return importsOff();
  ingest::ImportReply reply = options_.imports->begin(job, body);
  // Chunks must fit the request body limit; the client sizes its uploads from this.
  if (reply.status) reply.body["max_chunk_bytes"] = options_.maxBodyBytes;
  ApiResponse r = fromReply(reply);
  if (reply.created) {
    r.headers.emplace_back("Location",
                           "/api/v1/imports/" + percentEncode(reply.body["id"].get<std::string>()));
  }
  return r;
}

ApiResponse Api::putImportFile(const std::string& id, const std::string& name,
                               const std::vector<std::pair<std::string, std::string>>& query,
                               std::string_view body) const {
  if (!options_.imports) return importsOff();
  auto offset = QueryParams(query).unsignedInt("offset", UINT64_MAX);
  if (!offset) return errorResponse(400, offset.message());
  return fromReply(options_.imports->put(id, name, offset->value_or(0), body));
}

ApiResponse Api::commitImport(const std::string& id, std::string_view body) const {
  if (!options_.imports) return importsOff();
  return fromReply(options_.imports->commit(id, body));
}

ApiResponse Api::abortImport(const std::string& id) const {
  if (!options_.imports) return importsOff();
  return fromReply(options_.imports->abort(id));
}

}  // namespace trainscope::http
