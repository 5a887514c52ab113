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

#include <memory>
#include <string>

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
};

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
  Reply Handle(const std::string& path, const std::string& body);

 private:
  Database* const db_;
  GatewayOptions options_;
  std::unique_ptr<http::HttpServer> server_;
};

}  // namespace megastore
