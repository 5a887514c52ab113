#include "api/gateway.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "api/gateway.pb.h"
#include "api/gateway_request.h"
#include "api/gateway_token.h"
#include "base/await.h"
#include "base/http/http_server.h"
#include "base/retry.h"
#include "base/status.h"
#include "base/strings.h"
#include "schema/entity_json.h"
#include "txn/transaction.h"

namespace megastore {

namespace {

using gateway::DecodeCursor;
using gateway::DecodeToken;
using gateway::EncodeCursor;
using gateway::EncodeToken;
using google::protobuf::util::JsonPrintOptions;
using google::protobuf::util::MessageToJsonString;

int HttpStatus(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
      return 400;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kFailedPrecondition:
      return 412;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

// An error in the one shape every JSON answer has (http::ErrorJson);
// `reason`, when known, goes in its details.
Gateway::Reply Error(const absl::Status& s, std::string_view reason = "") {
  const int status = HttpStatus(s);
  http::ErrorDetail detail;
  detail.reason = std::string(reason);
  if (detail.reason.empty() && s.code() == absl::StatusCode::kAborted) detail.reason = "CONFLICT";
  return {status,
          http::ErrorJson(status, absl::StatusCodeToString(s.code()), ToStd(s.message()), detail)};
}

// A reply in protobuf's JSON mapping: lowerCamelCase names, int64 as
// strings, and every field present (false, 0 and "" included), so a
// client never has to know a default.
Gateway::Reply Json(const google::protobuf::Message& m) {
  std::string out;
  JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  if (!MessageToJsonString(m, &out, options).ok())
    return Error(absl::InternalError("a reply that cannot be printed as JSON"));
  return {200, out + "\n"};
}

absl::StatusOr<replication::ReadLevel> ParseLevel(const std::string& level,
                                                  replication::ReadLevel fallback) {
  if (level.empty()) return fallback;
  if (level == "current") return replication::ReadLevel::kCurrent;
  if (level == "snapshot") return replication::ReadLevel::kSnapshot;
  if (level == "inconsistent") return replication::ReadLevel::kInconsistent;
  return absl::InvalidArgumentError(
      StrCat("level: \"", level, "\" is not current, snapshot or inconsistent"));
}

// Most keys one /v1/batchGet reads (and at most --gateway-max-page).
constexpr int64_t kMaxBatch = 100;
// Most entity groups one /v1/commitAcross writes, messages one commit
// sends, bytes in a queue's name, and characters in a message id.
constexpr int kMaxCommitGroups = 16;
constexpr int kMaxSends = 100;
constexpr size_t kMaxQueueName = 256;
constexpr size_t kMaxMessageId = 64;

// Answers one request.
class RequestHandler {
 public:
  RequestHandler(Database* db, const GatewayOptions& options)
      : db_(db),
        ctx_(db->context()),
        max_page_(options.max_page),
        mac_(*options.token_mac),
        nearest_(options.nearest) {
    options_.deadline = options.deadline;
  }

  absl::StatusOr<const schema::TableDescriptor*> Table(const std::string& name,
                                                       std::string_view what) {
    if (name.empty()) return absl::InvalidArgumentError(StrCat(what, ": missing"));
    const schema::TableDescriptor* t = db_->layout().schema().FindTable(name);
    if (t == nullptr) return absl::NotFoundError(StrCat(what, ": no table ", name));
    return t;
  }

  // A request's "replica": the index of the replica to read at.
  absl::StatusOr<int> Replica(const std::string& name) const {
    const auto& replicas = ctx_.client->options().replicas;
    const int local = ctx_.client->options().local;
    if (name.empty() || name == "local") return local;
    if (name == "nearest") {
      if (nearest_) {
        for (const std::string& dc : nearest_()) {
          for (size_t i = 0; i < replicas.size(); ++i)
            if (replicas[i].name == dc && replicas[i].type != replication::ReplicaType::kWitness)
              return static_cast<int>(i);
        }
      }
      return local;  // the Database's local replica always holds data
    }
    std::string known;
    for (size_t i = 0; i < replicas.size(); ++i) {
      if (replicas[i].name != name) {
        known += StrCat(known.empty() ? "" : ", ", replicas[i].name);
        continue;
      }
      if (replicas[i].type == replication::ReplicaType::kWitness)
        return absl::InvalidArgumentError(
            StrCat("replica: ", name, " is a witness, which holds no data to read"));
      return static_cast<int>(i);
    }
    return absl::InvalidArgumentError(StrCat(
        "replica: \"", name, "\" is not \"local\", \"nearest\" or a datacenter (", known, ")"));
  }

  // The datacenter of replica `i`.
  const std::string& ReplicaName(int i) const {
    return ctx_.client->options().replicas[static_cast<size_t>(i)].name;
  }

  // A transaction on the group row `root`, reading at replica `replica`.
  absl::StatusOr<std::shared_ptr<txn::Transaction>> BeginAt(
      const std::string& root, replication::ReadLevel level, int replica,
      absl::Duration deadline = absl::ZeroDuration()) {
    txn::TransactionOptions o = options_;
    o.level = level;
    o.replica = replica;
    if (deadline > absl::ZeroDuration()) o.deadline = deadline;
    return Await<std::shared_ptr<txn::Transaction>>(
        [&](auto cb) { txn::Transaction::BeginAtRow(ctx_, root, o, std::move(cb)); });
  }

  // A transaction on the group of `table`'s entity with key (prefix) `key`.
  absl::StatusOr<std::shared_ptr<txn::Transaction>> Begin(const schema::TableDescriptor& table,
                                                          const std::vector<schema::KeyValue>& key,
                                                          replication::ReadLevel level,
                                                          int replica) {
    MS_ASSIGN_OR_RETURN(std::string root, db_->layout().GroupRow(table, key));
    return BeginAt(root, level, replica);
  }

  // What a get asks for, checked: the table, the key, its group's row.
  struct GetTarget {
    const schema::TableDescriptor* table;
    std::vector<schema::KeyValue> key;
    std::string root;
    replication::ReadLevel level;
    int replica;
  };
  absl::StatusOr<GetTarget> Target(const gateway::GetRequest& req) {
    GetTarget g;
    MS_ASSIGN_OR_RETURN(g.table, Table(req.table(), "table"));
    MS_ASSIGN_OR_RETURN(g.level, ParseLevel(req.level(), replication::ReadLevel::kCurrent));
    MS_ASSIGN_OR_RETURN(g.replica, Replica(req.replica()));
    MS_ASSIGN_OR_RETURN(g.key,
                        schema::KeyFromJson(*g.table, g.table->primary_key(), req.key(), "key"));
    if (g.key.size() != static_cast<size_t>(g.table->primary_key_size()))
      return absl::InvalidArgumentError(StrCat("key: ", g.table->name(), " has ",
                                               g.table->primary_key_size(), " key parts; ",
                                               g.key.size(), " given"));
    MS_ASSIGN_OR_RETURN(g.root, db_->layout().GroupRow(*g.table, g.key));
    return g;
  }

  // Reads `g` in transaction `t`.
  absl::StatusOr<gateway::GetReply> GetIn(const GetTarget& g, txn::Transaction& t) {
    MS_ASSIGN_OR_RETURN(std::optional<schema::Entity> e,
                        Await<std::optional<schema::Entity>>(
                            [&](auto cb) { t.Get(g.table->name(), g.key, std::move(cb)); }));
    gateway::GetReply reply;
    reply.set_found(e.has_value());
    if (e) *reply.mutable_entity() = schema::EntityToJson(db_->layout().schema(), *g.table, *e);
    reply.set_read_token(EncodeToken(mac_, t));
    reply.set_position(t.position().position);
    reply.set_replica(ReplicaName(t.position().replica));
    return reply;
  }

  absl::StatusOr<gateway::GetReply> Get(const gateway::GetRequest& req) {
    MS_ASSIGN_OR_RETURN(GetTarget g, Target(req));
    MS_ASSIGN_OR_RETURN(auto t, BeginAt(g.root, g.level, g.replica));
    return GetIn(g, *t);
  }

  // Gets of several keys: one transaction per (group, level, replica), so
  // the keys of one group asked alike are read at one position.
  absl::StatusOr<gateway::BatchGetReply> BatchGet(const gateway::BatchGetRequest& req) {
    if (req.gets_size() == 0) return absl::InvalidArgumentError("gets: none given");
    const int64_t most = std::min<int64_t>(max_page_, kMaxBatch);
    if (req.gets_size() > most) {
      page_too_large_ = true;
      return absl::InvalidArgumentError(
          StrCat("gets: ", req.gets_size(), " keys; one batch reads at most ", most));
    }
    // One deadline for the whole batch, not one per group.
    const absl::Time end = absl::Now() + options_.deadline;
    std::map<std::tuple<std::string, int, int>, std::shared_ptr<txn::Transaction>> open;
    gateway::BatchGetReply reply;
    for (int i = 0; i < req.gets_size(); ++i) {
      const std::string what = StrCat("gets[", i, "].");
      auto named = [&](const absl::Status& s) {
        return absl::Status(s.code(), StrCat(what, s.message()));
      };
      absl::StatusOr<GetTarget> g = Target(req.gets(i));
      if (!g.ok()) return named(g.status());
      auto& t = open[{g->root, static_cast<int>(g->level), g->replica}];
      if (t == nullptr) {
        const absl::Duration left = end - absl::Now();
        if (left <= absl::ZeroDuration())
          return absl::DeadlineExceededError(StrCat(what, "the batch's deadline passed"));
        absl::StatusOr<std::shared_ptr<txn::Transaction>> began =
            BeginAt(g->root, g->level, g->replica, left);
        if (!began.ok()) return named(began.status());
        t = *std::move(began);
      }
      absl::StatusOr<gateway::GetReply> one = GetIn(*g, *t);
      if (!one.ok()) return named(one.status());
      *reply.add_replies() = *std::move(one);
    }
    return reply;
  }

  // A request's page `limit`: 0 is a full page (--gateway-max-page).
  absl::StatusOr<int64_t> PageLimit(int64_t limit) {
    if (limit < 0 || limit > max_page_) {
      page_too_large_ = true;
      return absl::InvalidArgumentError(StrCat(
          "limit: ", limit, " is not between 0 (a full page of ", max_page_, ") and ", max_page_));
    }
    return limit == 0 ? max_page_ : limit;
  }

  absl::StatusOr<gateway::QueryReply> Query(const gateway::QueryRequest& req) {
    const schema::SchemaIndex& sx = db_->layout().schema();
    txn::QueryOptions q;
    MS_ASSIGN_OR_RETURN(q.limit, PageLimit(req.limit()));
    MS_ASSIGN_OR_RETURN(q.cursor, DecodeCursor(mac_, req.cursor()));
    MS_ASSIGN_OR_RETURN(const int replica, Replica(req.replica()));
    gateway::QueryReply reply;
    auto fill = [&](const schema::TableDescriptor& table, const txn::QueryResult& r) {
      for (const schema::Entity& e : r.entities)
        *reply.add_entities() = schema::EntityToJson(sx, table, e);
      reply.set_cursor(EncodeCursor(mac_, r.cursor));
    };
    if (!req.index().empty()) {
      const schema::IndexDescriptor* index = sx.FindIndex(req.index());
      if (index == nullptr) return absl::NotFoundError(StrCat("index: no index ", req.index()));
      MS_ASSIGN_OR_RETURN(const schema::TableDescriptor* table,
                          Table(index->table(), "index table"));
      MS_ASSIGN_OR_RETURN(std::vector<schema::KeyValue> values,
                          schema::KeyFromJson(*table, index->columns(), req.values(), "values"));
      if (index->scope() == schema::IndexDescriptor::GLOBAL) {
        MS_ASSIGN_OR_RETURN(auto level, ParseLevel(req.level(), replication::ReadLevel::kSnapshot));
        if (replica != ctx_.client->options().local)
          return absl::InvalidArgumentError(
              StrCat("replica: a global index query is served by the gateway's own datacenter (",
                     ReplicaName(ctx_.client->options().local), "), not ", req.replica()));
        reply.set_replica(ReplicaName(replica));
        MS_ASSIGN_OR_RETURN(txn::QueryResult r, Await<txn::QueryResult>([&](auto cb) {
                              txn::GlobalIndexQuery(ctx_, index->name(), values, q, level,
                                                    std::move(cb));
                            }));
        fill(*table, r);
        return reply;
      }
      MS_ASSIGN_OR_RETURN(auto level, ParseLevel(req.level(), replication::ReadLevel::kCurrent));
      MS_ASSIGN_OR_RETURN(const schema::TableDescriptor* root,
                          Table(req.root_table(), "root_table"));
      MS_ASSIGN_OR_RETURN(
          std::vector<schema::KeyValue> root_key,
          schema::KeyFromJson(*root, root->primary_key(), req.root_key(), "root_key"));
      MS_ASSIGN_OR_RETURN(auto t, Begin(*root, root_key, level, replica));
      MS_ASSIGN_OR_RETURN(txn::QueryResult r, Await<txn::QueryResult>([&](auto cb) {
                            t->IndexQuery(index->name(), values, q, std::move(cb));
                          }));
      fill(*table, r);
      Served(*t, reply);
      return reply;
    }
    MS_ASSIGN_OR_RETURN(const schema::TableDescriptor* table, Table(req.table(), "table"));
    MS_ASSIGN_OR_RETURN(auto level, ParseLevel(req.level(), replication::ReadLevel::kCurrent));
    MS_ASSIGN_OR_RETURN(
        std::vector<schema::KeyValue> prefix,
        schema::KeyFromJson(*table, table->primary_key(), req.key_prefix(), "key_prefix"));
    MS_ASSIGN_OR_RETURN(auto t, Begin(*table, prefix, level, replica));
    MS_ASSIGN_OR_RETURN(txn::QueryResult r, Await<txn::QueryResult>([&](auto cb) {
                          t->Query(table->name(), prefix, q, std::move(cb));
                        }));
    fill(*table, r);
    Served(*t, reply);
    return reply;
  }

  // Where a query in a group was read: its token, position and replica.
  void Served(const txn::Transaction& t, gateway::QueryReply& reply) const {
    reply.set_read_token(EncodeToken(mac_, t));
    reply.set_position(t.position().position);
    reply.set_replica(ReplicaName(t.position().replica));
  }

  // A queue's name in a request: named by `what`, non-empty and bounded.
  static absl::Status CheckQueueName(const std::string& queue, std::string_view what) {
    if (queue.empty()) return absl::InvalidArgumentError(StrCat(what, ": missing"));
    if (queue.size() > kMaxQueueName)
      return absl::InvalidArgumentError(
          StrCat(what, ": ", queue.size(), " bytes; a queue's name has at most ", kMaxQueueName));
    return absl::OkStatus();
  }

  // Buffers the request's mutations, sends and consumes in `t`.
  absl::Status Apply(const gateway::CommitRequest& req, txn::Transaction& t) {
    for (int i = 0; i < req.mutations_size(); ++i) {
      const gateway::Mutation& m = req.mutations(i);
      const std::string what = StrCat("mutations[", i, "]");
      MS_ASSIGN_OR_RETURN(const schema::TableDescriptor* table, Table(m.table(), what + ".table"));
      if (m.has_put() == (m.delete_key_size() > 0))
        return absl::InvalidArgumentError(StrCat(what, ": give exactly one of put and delete_key"));
      if (m.has_put()) {
        absl::StatusOr<schema::Entity> e =
            schema::EntityFromJson(db_->layout().schema(), *table, m.put());
        if (!e.ok())
          return absl::Status(e.status().code(), StrCat(what, ".put: ", e.status().message()));
        if (absl::Status s = t.Put(table->name(), *std::move(e)); !s.ok())
          return absl::Status(s.code(), StrCat(what, ": ", s.message()));
      } else {
        MS_ASSIGN_OR_RETURN(std::vector<schema::KeyValue> key,
                            schema::KeyFromJson(*table, table->primary_key(), m.delete_key(),
                                                what + ".delete_key"));
        if (absl::Status s = t.Delete(table->name(), std::move(key)); !s.ok())
          return absl::Status(s.code(), StrCat(what, ": ", s.message()));
      }
    }
    for (int i = 0; i < req.sends_size(); ++i) {
      const gateway::QueueSend& m = req.sends(i);
      const std::string what = StrCat("sends[", i, "]");
      MS_ASSIGN_OR_RETURN(const schema::TableDescriptor* table,
                          Table(m.root_table(), what + ".root_table"));
      MS_ASSIGN_OR_RETURN(
          std::vector<schema::KeyValue> key,
          schema::KeyFromJson(*table, table->primary_key(), m.root_key(), what + ".root_key"));
      MS_RETURN_IF_ERROR(CheckQueueName(m.queue(), what + ".queue"));
      if (absl::Status s = t.Send(table->name(), key, m.queue(), m.body()); !s.ok())
        return absl::Status(s.code(), StrCat(what, ": ", s.message()));
    }
    for (int i = 0; i < req.consumes_size(); ++i) {
      const gateway::QueueConsume& m = req.consumes(i);
      const std::string what = StrCat("consumes[", i, "]");
      MS_RETURN_IF_ERROR(CheckQueueName(m.queue(), what + ".queue"));
      // Ids are what ReadQueue gave out: hex digits.
      if (m.id().empty() || m.id().size() > kMaxMessageId ||
          m.id().find_first_not_of("0123456789abcdef") != std::string::npos)
        return absl::InvalidArgumentError(StrCat(what, ".id: \"",
                                                 absl::CEscape(m.id().substr(0, kMaxMessageId)),
                                                 "\" is not a message id /v1/readQueue returned"));
      // Waiting as of the read (and, the commit being conditional on that
      // read, still waiting at commit): a message consumed already, by
      // another commit or earlier in this one, is refused, never consumed twice.
      MS_ASSIGN_OR_RETURN(std::optional<txn::QueueMessage> message,
                          Await<std::optional<txn::QueueMessage>>(
                              [&](auto cb) { t.ReadMessage(m.queue(), m.id(), std::move(cb)); }));
      if (!message)
        return absl::FailedPreconditionError(StrCat(
            what, ": message ", m.id(), " is not waiting in queue \"", absl::CEscape(m.queue()),
            "\" as of the read token's read (consumed already, or never sent); nothing "
            "was written"));
      if (absl::Status s = t.Consume(*message); !s.ok())
        return absl::Status(s.code(), StrCat(what, ": ", s.message()));
    }
    return absl::OkStatus();
  }

  // A commit request's group, and where its read token read (none: a
  // blind write), checked before anything is done.
  struct CommitTarget {
    std::string root_row;
    std::optional<replication::LogPosition> read_at;
  };
  absl::StatusOr<CommitTarget> CheckCommit(const gateway::CommitRequest& req) {
    MS_ASSIGN_OR_RETURN(const schema::TableDescriptor* root, Table(req.root_table(), "root_table"));
    MS_ASSIGN_OR_RETURN(
        std::vector<schema::KeyValue> root_key,
        schema::KeyFromJson(*root, root->primary_key(), req.root_key(), "root_key"));
    CommitTarget c;
    MS_ASSIGN_OR_RETURN(c.root_row, db_->layout().GroupRow(*root, root_key));
    if (req.mutations_size() == 0 && req.sends_size() == 0 && req.consumes_size() == 0)
      return absl::InvalidArgumentError("mutations: none given (nor sends or consumes)");
    if (req.sends_size() > kMaxSends)
      return absl::InvalidArgumentError(
          StrCat("sends: ", req.sends_size(), " messages; one commit sends at most ", kMaxSends));
    if (req.consumes_size() > kMaxBatch)
      return absl::InvalidArgumentError(StrCat(
          "consumes: ", req.consumes_size(), " messages; one commit consumes at most ", kMaxBatch));
    if (req.read_token().empty()) {
      if (req.consumes_size() > 0)
        return absl::InvalidArgumentError(
            "consumes: give the read_token of the /v1/readQueue that returned the messages (a "
            "commit without one could consume a message another commit already consumed)");
      return c;
    }
    absl::StatusOr<gateway::ReadToken> decoded = DecodeToken(mac_, req.read_token());
    if (decoded.ok()) decoded = CheckToken(*std::move(decoded), c.root_row);
    if (!decoded.ok()) {
      bad_read_token_ = true;
      return decoded.status();
    }
    const gateway::ReadToken& token = *decoded;
    if (token.inconsistent()) {
      inconsistent_token_ = true;
      return absl::FailedPreconditionError(
          "read_token: from an inconsistent read, which saw no position a commit could be "
          "conditional on; read again at level current or snapshot");
    }
    replication::LogPosition& at = c.read_at.emplace();
    at.position = token.position();
    at.timestamp = token.timestamp();
    at.next_leader = token.next_leader();
    at.replica = token.replica();
    return c;
  }

  // A transaction at the position of `c`'s read token, conditional on
  // nothing committed in the group since, whatever it wrote: the reads
  // behind the token are not this transaction's, so a lost position is
  // never promoted past.
  std::shared_ptr<txn::Transaction> AtToken(const CommitTarget& c, absl::Duration deadline) {
    replication::GroupRef group;
    group.set_table(db_->layout().entity_table());
    group.set_root(c.root_row);
    TransactionOptions conditional = options_;
    conditional.promote = false;
    return std::make_shared<txn::Transaction>(
        ctx_, conditional, group, *c.read_at,
        ctx_.client->env()->MonotonicMicros() + absl::ToInt64Microseconds(deadline));
  }

  // Moves the messages a commit of group `root_row` sent into their
  // queues now; a failure leaves them in the outbox for the sweeper
  // (Database::SweepQueues), which delivers them exactly once too.
  void Deliver(const std::string& root_row) {
    (void)Await<int>([&](auto cb) { txn::DeliverPending(ctx_, root_row, std::move(cb)); });
  }

  absl::StatusOr<gateway::CommitReply> Commit(const gateway::CommitRequest& req) {
    MS_ASSIGN_OR_RETURN(CommitTarget c, CheckCommit(req));
    absl::StatusOr<txn::CommitInfo> info;
    if (c.read_at) {
      // Commit right after the read: the next position, or a conflict.
      std::shared_ptr<txn::Transaction> t = AtToken(c, options_.deadline);
      MS_RETURN_IF_ERROR(Apply(req, *t));
      info = Await<txn::CommitInfo>([&](auto cb) { t->Commit(std::move(cb)); });
    } else {
      // A blind write: retried on conflict (it read nothing that could change).
      info = Await<txn::CommitInfo>([&](auto cb) {
        txn::RunAtRow(
            ctx_, c.root_row,
            [&](std::shared_ptr<txn::Transaction> t, absl::AnyInvocable<void(absl::Status)> done) {
              done(Apply(req, *t));
            },
            std::move(cb));
      });
    }
    if (!info.ok()) return info.status();
    if (info->wrote && req.sends_size() > 0) Deliver(c.root_row);
    return CommitReplyOf(*info);
  }

  static gateway::CommitReply CommitReplyOf(const txn::CommitInfo& info) {
    gateway::CommitReply reply;
    reply.set_position(info.position);
    reply.set_timestamp(info.timestamp);
    reply.set_wrote(info.wrote);
    return reply;
  }

  // Commits to several groups at once (txn::CommitAcross: two-phase commit
  // when more than one is written). With any read token the whole commit is
  // conditional and a conflict is the client's (409); all blind, a
  // conflict is retried from the groups' current positions.
  absl::StatusOr<gateway::CommitReply> CommitAcross(const gateway::CommitAcrossRequest& req) {
    if (req.commits_size() == 0) return absl::InvalidArgumentError("commits: none given");
    if (req.commits_size() > kMaxCommitGroups)
      return absl::InvalidArgumentError(StrCat("commits: ", req.commits_size(),
                                               " entity groups; one commit writes at most ",
                                               kMaxCommitGroups));
    int sends = 0;
    for (const gateway::CommitRequest& c : req.commits()) sends += c.sends_size();
    if (sends > kMaxSends)
      return absl::InvalidArgumentError(StrCat(
          "commits: ", sends, " messages sent in all; one commit sends at most ", kMaxSends));
    std::vector<CommitTarget> targets;
    std::map<std::string, int> group_of;  // root row -> its commits[] index
    bool conditional = false;
    for (int i = 0; i < req.commits_size(); ++i) {
      absl::StatusOr<CommitTarget> c = CheckCommit(req.commits(i));
      if (!c.ok())
        return absl::Status(c.status().code(), StrCat("commits[", i, "].", c.status().message()));
      if (auto [it, added] = group_of.emplace(c->root_row, i); !added)
        return absl::InvalidArgumentError(StrCat("commits[", i, "]: the entity group of commits[",
                                                 it->second,
                                                 "]; give each group once, with all its writes"));
      conditional = conditional || c->read_at.has_value();
      targets.push_back(*std::move(c));
    }
    Retry retry = txn::TransactionRetry(ctx_.client->env(), options_);
    while (true) {
      txn::TransactionOptions attempt = options_;
      MS_RETURN_IF_ERROR(txn::StartAttempt(retry, options_.deadline, &attempt));
      std::vector<std::shared_ptr<txn::Transaction>> parts;
      absl::Status failed;
      for (size_t i = 0; i < targets.size() && failed.ok(); ++i) {
        const CommitTarget& c = targets[i];
        absl::StatusOr<std::shared_ptr<txn::Transaction>> t =
            c.read_at ? AtToken(c, attempt.deadline)
                      : BeginAt(c.root_row, replication::ReadLevel::kCurrent,
                                ctx_.client->options().local, attempt.deadline);
        if (t.ok()) {
          failed = Apply(req.commits(static_cast<int>(i)), **t);
          parts.push_back(*std::move(t));
        } else {
          failed = t.status();
        }
        if (!failed.ok()) {
          // Nothing was proposed: a position not found is as retryable as
          // a conflict (blind parts only); anything else is the answer.
          if (!txn::PositionFailure(failed) || conditional)
            return absl::Status(failed.code(), StrCat("commits[", i, "].", failed.message()));
        }
      }
      if (failed.ok()) {
        absl::StatusOr<txn::CommitInfo> info =
            Await<txn::CommitInfo>([&](auto cb) { txn::CommitAcross(ctx_, parts, std::move(cb)); });
        if (info.ok()) {
          for (int i = 0; i < req.commits_size(); ++i)
            if (info->wrote && req.commits(i).sends_size() > 0)
              Deliver(targets[static_cast<size_t>(i)].root_row);
          return CommitReplyOf(*info);
        }
        if (!absl::IsAborted(info.status()) || conditional) return info.status();
        failed = info.status();
      }
      parts.clear();
      if (!retry.SleepBeforeRetry()) {
        if (retry.attempts_left()) return txn::DeadlinePassed(options_.deadline, retry.attempts());
        return failed;
      }
    }
  }

  absl::StatusOr<gateway::ReadQueueReply> ReadQueue(const gateway::ReadQueueRequest& req) {
    MS_ASSIGN_OR_RETURN(const schema::TableDescriptor* root, Table(req.root_table(), "root_table"));
    MS_ASSIGN_OR_RETURN(
        std::vector<schema::KeyValue> root_key,
        schema::KeyFromJson(*root, root->primary_key(), req.root_key(), "root_key"));
    MS_RETURN_IF_ERROR(CheckQueueName(req.queue(), "queue"));
    MS_ASSIGN_OR_RETURN(const int64_t limit, PageLimit(req.limit()));
    MS_ASSIGN_OR_RETURN(replication::ReadLevel level,
                        ParseLevel(req.level(), replication::ReadLevel::kCurrent));
    MS_ASSIGN_OR_RETURN(int replica, Replica(req.replica()));
    MS_ASSIGN_OR_RETURN(auto t, Begin(*root, root_key, level, replica));
    MS_ASSIGN_OR_RETURN(std::vector<txn::QueueMessage> messages,
                        Await<std::vector<txn::QueueMessage>>(
                            [&](auto cb) { t->ReadQueue(req.queue(), limit, std::move(cb)); }));
    gateway::ReadQueueReply reply;
    for (txn::QueueMessage& m : messages) {
      gateway::QueueMessage* out = reply.add_messages();
      out->set_id(std::move(m.id));
      out->set_queue(std::move(m.queue));
      out->set_body(std::move(m.body));
    }
    reply.set_read_token(EncodeToken(mac_, *t));
    reply.set_position(t->position().position);
    reply.set_replica(ReplicaName(t->position().replica));
    return reply;
  }

  // `token` if it names a replica with data and the group `root_row`.
  absl::StatusOr<gateway::ReadToken> CheckToken(gateway::ReadToken token,
                                                const std::string& root_row) const {
    const auto& replicas = ctx_.client->options().replicas;
    if (token.replica() < 0 || token.replica() >= static_cast<int>(replicas.size()) ||
        replicas[static_cast<size_t>(token.replica())].type == replication::ReplicaType::kWitness)
      return absl::InvalidArgumentError("read_token: names no replica with data");
    if (token.root() != root_row)
      return absl::InvalidArgumentError("read_token: it is from a read of another entity group");
    return token;
  }

  // Why the request was refused, for the error's details ("": no
  // particular reason beyond its code).
  std::string_view reason() const {
    if (page_too_large_) return "PAGE_TOO_LARGE";
    if (bad_read_token_) return "BAD_READ_TOKEN";
    if (inconsistent_token_) return "INCONSISTENT_READ_TOKEN";
    return "";
  }
  bool page_too_large() const { return page_too_large_; }
  bool bad_read_token() const { return bad_read_token_; }

 private:
  Database* const db_;
  const txn::Context ctx_;
  txn::TransactionOptions options_;
  const int64_t max_page_;
  const TokenMac& mac_;
  const std::function<std::vector<std::string>()>& nearest_;  // GatewayOptions::nearest
  bool page_too_large_ = false;
  bool bad_read_token_ = false;
  bool inconsistent_token_ = false;
};

template <typename Request, typename Fn>
Gateway::Reply Serve(const std::string& body, int max_json_depth, bool* too_deep,
                     const RequestHandler& h, Fn fn) {
  Request req;
  if (absl::Status s = gateway::ParseRequest(body, &req, max_json_depth, too_deep); !s.ok())
    return Error(s, *too_deep ? "JSON_TOO_DEEP" : "BAD_JSON");
  auto reply = fn(req);
  if (!reply.ok()) return Error(reply.status(), h.reason());
  return Json(*reply);
}

}  // namespace

Gateway::Gateway(Database* db, GatewayOptions options) : db_(db), options_(std::move(options)) {
  if (options_.token_mac == nullptr)
    options_.token_mac = std::make_shared<const TokenMac>(TokenMac::Random());
}

Gateway::~Gateway() { Stop(); }

Gateway::Reply Gateway::Handle(const std::string& path, const std::string& body,
                               const std::string& authorization, const std::string& tls_principal) {
  // Who asks: a bearer token's principal, else the TLS certificate's.
  std::string principal = tls_principal;
  if (!authorization.empty()) {
    constexpr std::string_view kBearer = "bearer ";  // the scheme is case-insensitive (RFC 7235)
    auto it = absl::AsciiStrToLower(authorization.substr(0, kBearer.size())) == kBearer
                  ? options_.tokens.find(
                        Sha256Hex(std::string_view(authorization).substr(kBearer.size())))
                  : options_.tokens.end();
    if (it == options_.tokens.end()) {
      Count(path, 401, Refusal::kUnauthenticated);
      return Error(absl::UnauthenticatedError(
                       "the Authorization header holds no bearer token this gateway knows"),
                   "UNKNOWN_TOKEN");
    }
    principal = it->second;
  }
  const bool writes = path == "/v1/commit" || path == "/v1/commitAcross";
  if (options_.authorize &&
      (writes || path == "/v1/get" || path == "/v1/batchGet" || path == "/v1/query" ||
       path == "/v1/readQueue" || path == "/v1/schema")) {
    if (absl::Status s = options_.authorize(principal, writes, db_->layout().entity_table());
        !s.ok()) {
      Count(path, HttpStatus(s), Refusal::kDenied);
      return Error(s, "ACCESS_DENIED");
    }
  }
  RequestHandler h(db_, options_);
  bool too_deep = false;
  const int depth = options_.max_json_depth;
  Reply reply;
  std::string endpoint = path;
  if (path == "/v1/get") {
    reply = Serve<gateway::GetRequest>(body, depth, &too_deep, h,
                                       [&](const auto& r) { return h.Get(r); });
  } else if (path == "/v1/batchGet") {
    reply = Serve<gateway::BatchGetRequest>(body, depth, &too_deep, h,
                                            [&](const auto& r) { return h.BatchGet(r); });
  } else if (path == "/v1/query") {
    reply = Serve<gateway::QueryRequest>(body, depth, &too_deep, h,
                                         [&](const auto& r) { return h.Query(r); });
  } else if (path == "/v1/commit") {
    reply = Serve<gateway::CommitRequest>(body, depth, &too_deep, h,
                                          [&](const auto& r) { return h.Commit(r); });
  } else if (path == "/v1/commitAcross") {
    reply = Serve<gateway::CommitAcrossRequest>(body, depth, &too_deep, h,
                                                [&](const auto& r) { return h.CommitAcross(r); });
  } else if (path == "/v1/readQueue") {
    reply = Serve<gateway::ReadQueueRequest>(body, depth, &too_deep, h,
                                             [&](const auto& r) { return h.ReadQueue(r); });
  } else if (path == "/v1/schema") {
    reply = Json(db_->layout().schema().schema());
  } else {
    endpoint = "other";
    reply =
        Error(absl::NotFoundError(StrCat("no endpoint ", path,
                                         "; try /v1/get, /v1/batchGet, /v1/query, /v1/readQueue, "
                                         "/v1/commit, /v1/commitAcross, /v1/schema")),
              "NO_SUCH_ENDPOINT");
  }
  Count(endpoint, reply.status,
        too_deep             ? Refusal::kTooDeep
        : h.page_too_large() ? Refusal::kPageTooLarge
        : h.bad_read_token() ? Refusal::kBadReadToken
                             : Refusal::kNone);
  return reply;
}

absl::Status Gateway::Start() {
  server_ = std::make_unique<http::HttpServer>(options_.listen, options_.workers);
  static constexpr const char* kEndpoints[] = {"/v1/get",       "/v1/batchGet", "/v1/query",
                                               "/v1/readQueue", "/v1/commit",   "/v1/commitAcross",
                                               "/v1/schema",    "/healthz",     "/readyz"};
  for (const char* path : kEndpoints) {
    const std::string p = path;
    server_->HandleRequests(p, [this, p](const http::Request& req) {
      const bool get_ok = p == "/v1/schema" || p == "/healthz" || p == "/readyz";
      const char* allowed = get_ok ? "GET" : "POST";
      if (req.method != allowed && !(get_ok && req.method == "HEAD")) {
        Count(p, 405, Refusal::kWrongMethod);
        return http::MethodNotAllowed(p, get_ok ? "GET, HEAD" : "POST");
      }
      // Alive: this process answers. Ready: it can serve reads and commits
      // (its client library is open, which it is once the gateway runs).
      if (p == "/healthz" || p == "/readyz")
        return http::Response{200, "application/json", "{\"status\":\"ok\"}\n", {}};
      Reply r = Handle(p, req.body, req.authorization, req.principal);
      return http::Response{r.status, "application/json", std::move(r.json), {}};
    });
  }
  server_->HandleUnknown([](const http::Request& req) {
    std::string known;
    for (const char* p : kEndpoints) known += StrCat(known.empty() ? "" : ", ", p);
    return http::JsonErrorResponse(404, "NOT_FOUND",
                                   StrCat("no endpoint ", req.path, "; the gateway serves ", known),
                                   {"NO_SUCH_ENDPOINT", {{"path", req.path}}});
  });
  return server_->Start();
}

void Gateway::Stop() {
  if (server_) server_->Stop();
}

int Gateway::port() const { return server_ ? server_->port() : 0; }

}  // namespace megastore
