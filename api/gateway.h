// The HTTP/JSON gateway (docs/gateway.md): the untyped, schema-driven form
// of the client API over HTTP, for clients in other languages. Requests and
// replies are api/gateway.proto in protobuf's JSON mapping; entities are
// JSON objects of their fields by name (schema/entity_json.h).
//
//   POST /v1/get     one entity by key
//   POST /v1/query   ancestor, local index or global index query
//   POST /v1/commit  puts and deletes in one entity group
//   GET  /v1/schema  the schema, as JSON
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "api/database.h"
#include "base/token_mac.h"

namespace megastore {

namespace http {
class HttpServer;
}

struct GatewayOptions {
  std::string listen = "127.0.0.1:0";
  int workers = 8;  // requests served at once (each blocks a worker)
  // Each request's deadline.
  absl::Duration deadline = absl::Seconds(10);
  // Objects and arrays in a request body nest at most this deep (checked
  // before the body is parsed).
  int max_json_depth = 32;
  // Most entities one query page returns; a query's "limit" of 0 means this.
  int64_t max_page = 1000;
  // Seals the read tokens handed out, so a client cannot forge or alter
  // one (its position, timestamp or replica). Gateways that share it accept
  // each other's tokens. Null: a random secret of this gateway's own.
  std::shared_ptr<const TokenMac> token_mac;
  // Bearer tokens (`Authorization: Bearer TOKEN`): the SHA-256 (hex) of a
  // token -> the principal it stands for (LoadGatewayTokens). A request
  // without one acts as its TLS client certificate's principal.
  std::map<std::string, std::string> tokens;
  // Asked for every request once its principal is known: may it read
  // (get, query, schema) or write (commit) `object` (the schema's table)?
  // OK or PERMISSION_DENIED. Unset: everything is allowed.
  std::function<absl::Status(const std::string& principal, bool write, const std::string& object)>
      authorize;
  // The datacenters holding data, nearest first by measured round trip
  // (a request's "replica": "nearest" takes the first that is one).
  // Unset or empty: the gateway's own datacenter.
  std::function<std::vector<std::string>()> nearest;
};

// A gateway's tokens file: one "sha256:HEX PRINCIPAL" per line ('#'
// comments, blank lines). InvalidArgument naming the line that is wrong.
absl::StatusOr<std::map<std::string, std::string>> LoadGatewayTokens(const std::string& path);

// What a gateway answered, for /metrics.
struct GatewayStats {
  // Replies by endpoint and HTTP status ("other" for unknown paths).
  std::map<std::pair<std::string, int>, uint64_t> replies;
  // Requests refused by a limit or a seal: nested deeper than
  // max_json_depth, a query limit outside 0..max_page, a read token that
  // is forged, altered or from elsewhere, the wrong HTTP method.
  uint64_t too_deep = 0;
  uint64_t page_too_large = 0;
  uint64_t bad_read_token = 0;
  uint64_t wrong_method = 0;
  uint64_t unauthenticated = 0;  // a bearer token not known (401)
  uint64_t denied = 0;           // refused by the access policy (403)
};
// `stats` as Prometheus text (megastore_gateway_*).
std::string GatewayStatsMetrics(const GatewayStats& stats);

class Gateway {
 public:
  // `db` must outlive the gateway.
  Gateway(Database* db, GatewayOptions options);
  ~Gateway();

  absl::Status Start();
  void Stop();
  int port() const;

  // One request, without HTTP: the reply body and HTTP status for `body`
  // (JSON) at `path`. What the HTTP handlers call; tests use it directly.
  struct Reply {
    int status = 200;
    std::string json;
  };
  // `authorization` is the request's Authorization header, `principal` its
  // TLS client certificate's (both may be empty).
  Reply Handle(const std::string& path, const std::string& body,
               const std::string& authorization = "", const std::string& principal = "");

  GatewayStats stats() const;

 private:
  enum class Refusal {
    kNone,
    kTooDeep,
    kPageTooLarge,
    kBadReadToken,
    kWrongMethod,
    kUnauthenticated,
    kDenied
  };
  void Count(const std::string& path, int status, Refusal refusal);

  Database* const db_;
  GatewayOptions options_;
  mutable std::mutex stats_mu_;
  GatewayStats stats_;
  std::unique_ptr<http::HttpServer> server_;
};

}  // namespace megastore
