// Authorization of RPC calls by principal (the caller's TLS certificate
// common name) against an AccessPolicy (access.proto).
//
// Until a policy is installed every caller may call everything (TLS alone
// decides who can connect). Once one is, each call is checked:
//   * "admin" may call every method;
//   * "replica" (the cluster's own processes) every method but an
//     operator's: the switches (dc.Replica, dc.Coordinator), table
//     administration (tablet.CreateTable, ...), acl.Set;
//   * a grant's read or write allows the calls of the client library and
//     the raw Bigtable verbs that read or write that object;
//   * anyone with a certificate may ask dc.Status and lock.Query; the
//     policy itself (acl.Get) is for replicas and admins.
// A refusal is PERMISSION_DENIED naming the principal, the action and the
// object, and is counted by method.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "base/rpc/rpc.h"
#include "base/transport.h"
#include "server/access.pb.h"

namespace megastore::server {

// What a call does to what.
struct Action {
  enum Kind {
    kAnyone,   // status: any principal
    kRead,     // reads `object`
    kWrite,    // writes `object`
    kReplica,  // the cluster's own traffic (Paxos between replicas, locks)
    kAdmin,    // an operator's
  };
  Kind kind = kAdmin;
  std::string object;  // the Bigtable table read or written (kRead, kWrite)
};
const char* KindName(Action::Kind kind);

// The action of calling `method` with `request`; InvalidArgument if the
// request does not name its table where it must.
absl::StatusOr<Action> ActionOf(std::string_view method, std::string_view request);

// InvalidArgument naming what is wrong: an unknown role, an empty principal
// or object, a grant of nothing, a policy without an admin.
absl::Status ValidatePolicy(const AccessPolicy& policy);

// Whether `grant_object` covers Bigtable table `table` (see access.proto).
bool Covers(std::string_view grant_object, std::string_view table);

class AccessControl {
 public:
  // The policy in force, or null (everything allowed).
  std::shared_ptr<const AccessPolicy> policy() const;
  // Installs `policy` if it is newer than the one in force; false if not.
  bool Install(AccessPolicy policy);

  // OK, or PERMISSION_DENIED naming the principal, the action and the
  // object (counted).
  absl::Status Authorize(const rpc::CallContext& ctx, std::string_view method,
                         std::string_view request);
  // The same for an action done on behalf of `principal` by a front end
  // (the JSON gateway); `via` names it in the refusal and its count.
  absl::Status AuthorizeAction(std::string_view principal, const Action& action,
                               std::string_view via, std::string_view peer = "");

  // For a process that reads the policy from elsewhere: until the first
  // answer (Install, or NoPolicy), every call but the anyone's is refused
  // Unavailable, rather than allowed by a policy not known yet.
  void RequireKnown(std::string from);
  void NoPolicy();

  // Refusals so far, by method.
  std::map<std::string, uint64_t> Refusals() const;

 private:
  mutable absl::Mutex mu_;
  std::shared_ptr<const AccessPolicy> policy_ ABSL_GUARDED_BY(mu_);
  // principal -> its member entry in policy_.
  std::map<std::string, const Member*, std::less<>> by_principal_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t, std::less<>> refusals_ ABSL_GUARDED_BY(mu_);
  std::string unknown_until_read_from_ ABSL_GUARDED_BY(mu_);  // non-empty: not known yet
};

// Keeps an AccessControl in step with the policy a lock role holds: asks
// its acl.Get now and every `interval` on a thread of its own, until
// Stop. For processes without the lock role (a replication server apart,
// a gateway); the access control refuses calls until the first answer.
class PolicyPoller {
 public:
  // `access` and `transport` must outlive Stop(). `who` names the process
  // in the log.
  PolicyPoller(AccessControl* access, Transport* transport, std::string lock_address,
               std::string who, absl::Duration interval);
  ~PolicyPoller();  // Stop()s
  void Start();
  void Stop();

 private:
  void Run();
  AccessControl* const access_;
  Transport* const transport_;
  const std::string lock_address_, who_;
  const absl::Duration interval_;
  absl::Notification stop_;
  std::thread thread_;
};

// The policy file of a lock role: checksummed, written atomically.
// nullopt if there is none yet; DataLoss if it is damaged.
absl::StatusOr<std::optional<AccessPolicy>> LoadPolicyFile(const std::string& path);
absl::Status SavePolicyFile(const std::string& path, const AccessPolicy& policy);

}  // namespace megastore::server
