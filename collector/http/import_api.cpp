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
  if (reply.status >= 400) {
    ApiResponse r = errorResponse(reply.status, reply.error);
    if (!reply.body.is_null()) {
      // The body of a refused chunk says where to resume: keep it beside the error.
      json body = reply.body;
      body["error"] = reply.error;
      r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
    }
    return r;
  }
  ApiResponse r;
  r.status = reply.status;
  r.body = reply.body.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

}  // namespace

bool Api::routeImports(std::string_view method, const std::vector<std::string>& seg,
                       const std::string& path,
                       const std::vector<std::pair<std::string, std::string>>& query,
                       std::string_view body, ApiResponse* out) const {
  QueryParams params(query);
  // /api/v1/jobs/{job}/imports
  const bool open = seg.size() == 5 && seg[2] == "jobs" && seg[4] == "imports";
  // /api/v1/imports/{id}, /api/v1/imports/{id}/commit, /api/v1/imports/{id}/files/{name}
  const bool session = seg.size() >= 4 && seg[2] == "imports";
  if (!open && !session) return false;
  if (!options_.imports) {
    *out = errorResponse(503, "imports are off on this collector");
    return true;
  }
  auto& imports = *options_.imports;
  if (open) {
    if (method != "POST") {
      *out = notAllowed(method, path, "POST");
    } else if (Status s = params.checkAllowed({}); !s) {
      *out = errorResponse(400, s.message());
    } else {
      ingest::ImportReply reply = imports.begin(seg[3], body);
      // Chunks must fit the request body limit; the client sizes its uploads from this.
      if (reply.status < 400) reply.body["max_chunk_bytes"] = options_.maxBodyBytes;
      *out = fromReply(reply);
      if (reply.status == 201) {
        out->headers.emplace_back(
            "Location", "/api/v1/imports/" + percentEncode(reply.body["id"].get<std::string>()));
      }
    }
    return true;
  }
  const std::string& id = seg[3];
  if (seg.size() == 4) {
    *out = method == "DELETE" ? fromReply(imports.abort(id)) : notAllowed(method, path, "DELETE");
  } else if (seg.size() == 5 && seg[4] == "commit") {
    *out =
        method == "POST" ? fromReply(imports.commit(id, body)) : notAllowed(method, path, "POST");
  } else if (seg.size() == 6 && seg[4] == "files") {
    if (method != "PUT") {
      *out = notAllowed(method, path, "PUT");
    } else if (Status s = params.checkAllowed({"offset"}); !s) {
      *out = errorResponse(400, s.message());
    } else {
      auto offset = params.unsignedInt("offset", UINT64_MAX);
      if (!offset) {
        *out = errorResponse(400, offset.message());
      } else {
        *out = fromReply(imports.put(id, seg[5], offset->value_or(0), body));
      }
    }
  } else {
    *out = errorResponse(404, "no route for " + std::string(method) + " " + path);
  }
  return true;
}

}  // namespace trainscope::http
