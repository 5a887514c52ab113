// The simulator's transactional workload (docs/replication.md, "The
// simulator"): bank branches (entity groups) whose accounts move money by
// two-phase commit and through queues, with a local index on balances, run
// by app servers beside the key-value clients and under the same faults.
//
// After the faults it settles every in-doubt transaction, delivers every
// outbox, collects every queued credit, and checks at every data replica:
//  * all or nothing: a two-phase transfer's records are in both groups or in
//    neither; an acknowledged one is there, a failed one is not;
//  * exactly once: every queued credit that left a branch arrived at its
//    target and was consumed there once (no money made or lost: the total
//    is what the branches started with);
//  * the index: each branch's balance index lists exactly its accounts;
//  * the replicas agree on every branch's accounts and records.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "schema/layout.h"
#include "storage/model/schema.pb.h"
#include "txn/transaction.h"

namespace megastore::sim {

class Cluster;

class Bank {
 public:
  // Compiles the bank schema. `clients` app servers run `ops` operations each.
  Bank(Cluster* cluster, int clients, int ops);
  ~Bank();

  // The Bigtable tables to create in every datacenter.
  std::vector<storage::TableSchema> Tables() const;
  // Creates the branches and their accounts (before the faults).
  absl::Status Setup();
  void Start();
  bool AllDone() const { return running_ == 0 && started_; }
  std::string Stuck() const;
  // Settles, drains and checks (after the faults healed).
  absl::Status SettleAndCheck();

  int transfers_ok() const { return ok_; }

 private:
  struct Op {
    enum class Kind { kTwoPhase, kQueued, kCollect } kind = Kind::kTwoPhase;
    std::string id;
    int64_t from = 0, to = 0, amount = 0;
    enum class Outcome { kRunning, kOk, kFailed, kUnknown, kNothing } outcome = Outcome::kRunning;
  };
  struct Client;

  txn::Context Ctx(int client) const;
  void Next(Client& c);
  void TwoPhase(Client& c, Op* op, int attempt);
  void Queued(Client& c, Op* op);
  void Collect(Client& c, Op* op);
  txn::Body CollectBody(int64_t branch, std::shared_ptr<bool> took);
  void Finish(Client& c, Op* op, absl::Status s);

  // Runs a transaction on `branch` to its end on virtual time.
  absl::StatusOr<txn::CommitInfo> RunNow(int client, int64_t branch, txn::Body body);
  // What replica `dc` holds for one branch.
  struct BranchView {
    std::map<int64_t, int64_t> balances;     // account -> balance
    std::map<std::string, int64_t> records;  // Xfer id -> amount
    size_t indexed = 0;                      // entries of the balance index
    bool index_ordered = true;
  };
  absl::StatusOr<BranchView> Read(int dc, int64_t branch);

  schema::Entity Account(int64_t branch, int64_t id, int64_t balance) const;
  schema::Entity Record(int64_t branch, const std::string& id, int64_t amount) const;
  int64_t Field(const schema::Entity& e, std::string_view table, std::string_view field) const;
  std::string StringField(const schema::Entity& e, std::string_view table,
                          std::string_view field) const;

  Cluster* const cluster_;
  const int ops_;
  std::unique_ptr<schema::Layout> layout_;
  std::vector<std::unique_ptr<Client>> clients_;
  std::map<int, std::unique_ptr<replication::GroupClient>> checkers_;  // one per data replica
  std::vector<std::unique_ptr<Op>> ops_done_;
  int running_ = 0;
  bool started_ = false;
  int ok_ = 0;
  uint64_t next_id_ = 0;
};

}  // namespace megastore::sim
