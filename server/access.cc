#include "server/access.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <algorithm>
#include <optional>
#include <set>

#include "base/file.h"
#include "base/logging.h"
#include "base/status.h"
#include "base/strings.h"

namespace megastore::server {
namespace {

using google::protobuf::internal::WireFormatLite;

// Calls `fn` with every occurrence, in order, of field 1 of a serialized
// message when it is length-delimited (a string or a nested message);
// false for bytes that do not parse. Nothing is copied or kept: a request
// of a million repeated fields costs time, not memory. Every request whose
// table an action needs carries it there, as the table itself or as
// GroupRef.table (nested once).
template <typename Fn>
bool ForEachField1(std::string_view bytes, Fn&& fn) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  for (;;) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0)  // the end, or bytes that are no tag
      return in.CurrentPosition() == static_cast<int>(bytes.size());
    if (tag == WireFormatLite::MakeTag(1, WireFormatLite::WIRETYPE_LENGTH_DELIMITED)) {
      uint32_t length = 0;
      if (!in.ReadVarint32(&length)) return false;
      const size_t at = static_cast<size_t>(in.CurrentPosition());
      if (length > bytes.size() - at) return false;
      if (!fn(bytes.substr(at, length))) return false;
      if (!in.Skip(static_cast<int>(length))) return false;
      continue;
    }
    if (!WireFormatLite::SkipField(&in, tag)) return false;
  }
}

// The table a request names at `depth` (1: field 1; 2: field 1 of field
// 1), read as protobuf's parser reads it: of a field given more than
// once, the last occurrence counts, and occurrences of a nested message
// merge. Anything else would let a request show the check one table and
// the handler another. "" if absent; nullopt for bytes that do not parse.
std::optional<std::string> TableOf(std::string_view request, int depth) {
  std::string_view table;
  const bool parsed = ForEachField1(request, [&](std::string_view field) {
    if (depth == 1) {
      table = field;
      return true;
    }
    return ForEachField1(field, [&](std::string_view inner) {
      table = inner;
      return true;
    });
  });
  if (!parsed) return std::nullopt;
  return std::string(table);
}

// Whether the request's `force` (field 15, a bool) is set: a raw write to a
// replicated table (storage/tabletserver/tablet_service.proto).
bool Forced(std::string_view bytes) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  bool forced = false;  // the last occurrence counts, as for protobuf's parser
  for (uint32_t tag; (tag = in.ReadTag()) != 0;) {
    if (tag == WireFormatLite::MakeTag(15, WireFormatLite::WIRETYPE_VARINT)) {
      uint64_t v = 0;
      if (!in.ReadVarint64(&v)) return true;  // unreadable: ask the most of the caller
      forced = v != 0;
      continue;
    }
    if (!WireFormatLite::SkipField(&in, tag)) return true;
  }
  return forced || in.CurrentPosition() != static_cast<int>(bytes.size());
}

struct MethodRule {
  std::string_view method;
  Action::Kind kind;
  int table_depth;  // 0: no table; 1: field 1; 2: field 1 of field 1
};

// Every method an application or operator may call; the rest (lock.*,
// ls.*, the cell's master) are the cluster's own.
constexpr MethodRule kRules[] = {
    {"dc.Status", Action::kAnyone, 0},
    {"acl.Get", Action::kReplica, 0},  // who may do what is for the cluster and its admins
    // Who holds a coordinator's locks: a writer that cannot reach a
    // coordinator asks, to know whether it must wait out the lease.
    {"lock.Query", Action::kAnyone, 0},
    {"dc.Replica", Action::kAdmin, 0},
    {"dc.Coordinator", Action::kAdmin, 0},
    {"repl.Truncate", Action::kAdmin, 0},  // msadmin group repair
    {"acl.Set", Action::kAdmin, 0},
    // Encryption at rest's keys: status, KEK rotation, crypto-shredding.
    {"keys.Status", Action::kAdmin, 0},
    {"keys.Rotate", Action::kAdmin, 0},
    {"keys.Destroy", Action::kAdmin, 0},
    // The client library: commits (Paxos, apply, invalidations, advisory
    // locks) write the group's table; reads (current, snapshot, catch-up,
    // coordinator checks) read it.
    {"repl.Paxos", Action::kWrite, 2},
    {"repl.Apply", Action::kWrite, 2},
    {"repl.State", Action::kRead, 2},
    {"repl.ReadLog", Action::kRead, 2},
    {"repl.Read", Action::kRead, 2},
    {"repl.Scan", Action::kRead, 2},
    {"repl.ScanIndex", Action::kRead, 1},
    // A hot group's commit sent to its home, which proposes it (only the
    // group's own rows: the home checks), and a retry's turn there.
    {"repl.Commit", Action::kWrite, 2},
    {"repl.AwaitTurn", Action::kWrite, 2},
    {"coord.Check", Action::kRead, 1},
    {"coord.Validate", Action::kRead, 1},
    {"coord.Invalidate", Action::kWrite, 1},
    {"coord.Lock", Action::kWrite, 1},
    {"coord.Unlock", Action::kWrite, 1},
    // Raw Bigtable verbs.
    {"tablet.ReadRows", Action::kRead, 1},
    {"tablet.GetTable", Action::kRead, 1},
    {"tablet.MutateRow", Action::kWrite, 1},
    {"tablet.MutateRows", Action::kWrite, 1},
    {"tablet.CheckAndMutateRow", Action::kWrite, 1},
    {"tablet.ReadModifyWriteRow", Action::kWrite, 1},
    {"tablet.CreateTable", Action::kAdmin, 0},
    {"tablet.DeleteTable", Action::kAdmin, 0},
    {"tablet.UpdateTable", Action::kAdmin, 0},
    {"tablet.AssignTablet", Action::kAdmin, 0},
    {"tablet.MergeTablets", Action::kAdmin, 0},
    {"tablet.LoadTablet", Action::kAdmin, 0},
    {"tablet.UnloadTablet", Action::kAdmin, 0},
    {"tablet.CompactTablet", Action::kAdmin, 0},
    {"tablet.SplitTablet", Action::kAdmin, 0},
};

constexpr std::string_view kRoles[] = {"admin", "replica"};

bool HasRole(const Member& m, std::string_view role) {
  for (const std::string& r : m.roles())
    if (r == role) return true;
  return false;
}

}  // namespace

const char* KindName(Action::Kind kind) {
  switch (kind) {
    case Action::kAnyone:
      return "ask";
    case Action::kRead:
      return "read";
    case Action::kWrite:
      return "write";
    case Action::kReplica:
      return "call the replica method";
    case Action::kAdmin:
      return "call the admin method";
  }
  return "?";
}

absl::StatusOr<Action> ActionOf(std::string_view method, std::string_view request) {
  for (const MethodRule& rule : kRules) {
    if (rule.method != method) continue;
    Action a;
    a.kind = rule.kind;
    const std::optional<std::string> table = rule.table_depth > 0
                                                 ? TableOf(request, rule.table_depth)
                                                 : std::optional<std::string>(std::string());
    if (rule.table_depth > 0) {
      if (!table.has_value() || table->empty())
        return absl::InvalidArgumentError(StrCat(method, ": the request names no table"));
      a.object = std::string(*table);
    }
    // A forced raw write goes around Paxos: the cluster's own, or an admin's.
    if (a.kind == Action::kWrite && method.substr(0, 7) == "tablet." && Forced(request))
      a.kind = Action::kReplica;
    return a;
  }
  return Action{Action::kReplica, ""};
}

bool Covers(std::string_view grant_object, std::string_view table) {
  if (grant_object == "*" || grant_object == table) return true;
  // A schema covers its tables: "PhotoApp" covers "PhotoApp.PhotosByTag".
  return table.size() > grant_object.size() &&
         table.substr(0, grant_object.size()) == grant_object && table[grant_object.size()] == '.';
}

absl::Status ValidatePolicy(const AccessPolicy& policy) {
  if (policy.version() > (uint64_t{1} << 62))
    return absl::InvalidArgumentError(StrCat("policy version ", policy.version(), " is past 2^62"));
  bool admin = false, replica = false;
  std::set<std::string> seen;
  for (const Member& m : policy.members()) {
    if (m.principal().empty()) return absl::InvalidArgumentError("a member has no principal");
    if (!seen.insert(m.principal()).second)
      return absl::InvalidArgumentError(
          StrCat("principal \"", m.principal(), "\" is listed twice"));
    for (const std::string& r : m.roles()) {
      if (std::find(std::begin(kRoles), std::end(kRoles), r) == std::end(kRoles))
        return absl::InvalidArgumentError(StrCat(
            "principal \"", m.principal(), "\": unknown role \"", r, "\" (roles: admin, replica)"));
      admin |= r == "admin";
      replica |= r == "replica";
    }
    for (const Grant& g : m.grants()) {
      if (g.object().empty())
        return absl::InvalidArgumentError(
            StrCat("principal \"", m.principal(), "\": a grant names no object"));
      if (!g.read() && !g.write())
        return absl::InvalidArgumentError(StrCat("principal \"", m.principal(),
                                                 "\": the grant on \"", g.object(),
                                                 "\" allows neither read nor write"));
    }
  }
  if (!admin)
    return absl::InvalidArgumentError(
        "the policy names no admin: nobody could change it again (give a "
        "principal --role=admin)");
  if (!replica)
    return absl::InvalidArgumentError(
        "the policy names no replica: the cluster's own processes would be "
        "refused by each other (give the "
        "principals of the datacenters' certificates --role=replica)");
  return absl::OkStatus();
}

std::shared_ptr<const AccessPolicy> AccessControl::policy() const {
  absl::MutexLock lock(&mu_);
  return policy_;
}

bool AccessControl::Install(AccessPolicy policy) {
  auto installed = std::make_shared<const AccessPolicy>(std::move(policy));
  absl::MutexLock lock(&mu_);
  if (policy_ != nullptr && policy_->version() >= installed->version()) return false;
  unknown_until_read_from_.clear();
  policy_ = std::move(installed);
  by_principal_.clear();
  for (const Member& m : policy_->members()) by_principal_[m.principal()] = &m;
  return true;
}

void AccessControl::RequireKnown(std::string from) {
  absl::MutexLock lock(&mu_);
  unknown_until_read_from_ = std::move(from);
}

void AccessControl::NoPolicy() {
  absl::MutexLock lock(&mu_);
  unknown_until_read_from_.clear();
}

absl::Status AccessControl::Authorize(const rpc::CallContext& ctx, std::string_view method,
                                      std::string_view request) {
  {
    absl::MutexLock lock(&mu_);
    if (policy_ == nullptr && unknown_until_read_from_.empty()) return absl::OkStatus();
  }
  absl::StatusOr<Action> action = ActionOf(method, request);
  if (!action.ok()) return action.status();
  return AuthorizeAction(ctx.principal, *action, method, ctx.peer);
}

absl::Status AccessControl::AuthorizeAction(std::string_view principal, const Action& action,
                                            std::string_view via, std::string_view peer) {
  absl::MutexLock lock(&mu_);
  if (action.kind == Action::kAnyone) return absl::OkStatus();
  if (!unknown_until_read_from_.empty())
    return absl::UnavailableError(
        StrCat("this process has not yet read the access policy from its datacenter's "
               "lock role at ",
               unknown_until_read_from_, "; retry"));
  if (policy_ == nullptr) return absl::OkStatus();
  auto it = by_principal_.find(principal);
  const Member* m = it == by_principal_.end() ? nullptr : it->second;
  if (m != nullptr) {
    if (HasRole(*m, "admin")) return absl::OkStatus();
    if (HasRole(*m, "replica") && action.kind != Action::kAdmin) return absl::OkStatus();
    if (action.kind == Action::kRead || action.kind == Action::kWrite)
      for (const Grant& g : m->grants())
        if ((action.kind == Action::kRead ? g.read() : g.write()) &&
            Covers(g.object(), action.object))
          return absl::OkStatus();
  }
  ++refusals_[std::string(via)];
  const std::string who =
      principal.empty() ? "a caller without a certificate name" : StrCat("\"", principal, "\"");
  const std::string what =
      action.kind == Action::kRead || action.kind == Action::kWrite
          ? StrCat(KindName(action.kind), " \"", action.object, "\" (", via, ")")
          : StrCat(KindName(action.kind), " ", via);
  MS_LOG_WARN_LIMITED("access: refused: {} may not {} (from {})", who, what,
                      peer.empty() ? "?" : peer);
  return absl::PermissionDeniedError(
      StrCat(who, " may not ", what,
             m == nullptr ? ": not in the access policy" : ": no role or grant allows it"));
}

std::map<std::string, uint64_t> AccessControl::Refusals() const {
  absl::MutexLock lock(&mu_);
  return {refusals_.begin(), refusals_.end()};
}

PolicyPoller::PolicyPoller(AccessControl* access, Transport* transport, std::string lock_address,
                           std::string who, absl::Duration interval)
    : access_(access),
      transport_(transport),
      lock_address_(std::move(lock_address)),
      who_(std::move(who)),
      interval_(interval) {}

PolicyPoller::~PolicyPoller() { Stop(); }

void PolicyPoller::Start() {
  access_->RequireKnown(lock_address_);
  thread_ = std::thread([this] { Run(); });
}

void PolicyPoller::Stop() {
  if (!thread_.joinable()) return;
  stop_.Notify();
  thread_.join();
}

void PolicyPoller::Run() {
  do {
    absl::Notification answered;
    transport_->Call(lock_address_, "acl.Get", "", absl::Seconds(5),
                     [this, &answered](absl::StatusOr<std::string> reply) {
                       AccessPolicy p;
                       if (reply.ok() && reply->empty()) access_->NoPolicy();
                       if (reply.ok() && !reply->empty() && p.ParseFromString(*reply) &&
                           ValidatePolicy(p).ok() && access_->Install(p))
                         RecordEvent(StrCat(who_, ": access policy version ", p.version(),
                                            " from the lock role at ", lock_address_));
                       answered.Notify();
                     });
    answered.WaitForNotification();
  } while (!stop_.WaitForNotificationWithTimeout(interval_));
}

absl::StatusOr<std::optional<AccessPolicy>> LoadPolicyFile(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadChecksummedFile(path, 16 << 20);
  if (absl::IsNotFound(bytes.status())) return std::nullopt;
  if (!bytes.ok()) return bytes.status();
  AccessPolicy p;
  if (!p.ParseFromString(*bytes))
    return absl::DataLossError(StrCat(path, ": not an access policy"));
  MS_RETURN_IF_ERROR(ValidatePolicy(p));
  return p;
}

absl::Status SavePolicyFile(const std::string& path, const AccessPolicy& policy) {
  return WriteChecksummedFile(path, policy.SerializeAsString());
}

}  // namespace megastore::server
