#include "sim/bank.h"

#include <cstdlib>

#include "base/logging.h"
#include "schema/compiler.h"
#include "sim/deployment.h"

namespace megastore::sim {

namespace {

constexpr char kSchema[] = R"(
CREATE SCHEMA Bank
CREATE TABLE Branch {
  required int64 id;
} PRIMARY KEY(id), ENTITY GROUP ROOT;
CREATE TABLE Account {
  required int64 branch;
  required int64 id;
  required int64 balance;
} PRIMARY KEY(branch, id), ENTITY GROUP KEY(branch) REFERENCES Branch;
CREATE TABLE Xfer {
  required int64 branch;
  required string id;
  required int64 amount;
} PRIMARY KEY(branch, id), ENTITY GROUP KEY(branch) REFERENCES Branch;
CREATE LOCAL INDEX AccountsByBalance ON Account(branch, balance);
)";

constexpr int64_t kBranches = 3;
constexpr int64_t kAccounts = 2;
constexpr int64_t kInitial = 100;

using txn::Transaction;
using Done = std::shared_ptr<absl::AnyInvocable<void(absl::Status)>>;
Done Park(absl::AnyInvocable<void(absl::Status)> done) {
  return std::make_shared<absl::AnyInvocable<void(absl::Status)>>(std::move(done));
}

}  // namespace

struct Bank::Client {
  int index = 0;
  int dc = 0;
  int left = 0;
  std::unique_ptr<GroupClient> gc;
};

Bank::Bank(Cluster* cluster, int clients, int ops) : cluster_(cluster), ops_(ops) {
  schema::CompileResult compiled = schema::CompileSchema(kSchema);
  MS_CHECK(compiled.ok(), "the bank schema does not compile");
  absl::StatusOr<schema::Layout> layout = schema::Layout::Create(compiled.descriptor);
  MS_CHECK_OK(layout.status());
  layout_ = std::make_unique<schema::Layout>(std::move(*layout));
  std::vector<int> data_dcs;
  for (size_t i = 0; i < cluster_->options().replicas.size(); ++i)
    if (cluster_->options().replicas[i] != ReplicaType::kWitness)
      data_dcs.push_back(static_cast<int>(i));
  for (int i = 0; i < clients; ++i) {
    auto c = std::make_unique<Client>();
    c->index = i;
    c->dc = data_dcs[static_cast<size_t>(i) % data_dcs.size()];
    clients_.push_back(std::move(c));
  }
}

Bank::~Bank() = default;

std::vector<storage::TableSchema> Bank::Tables() const { return txn::TablesFor(*layout_); }

txn::Context Bank::Ctx(int client) const {
  return txn::Context{clients_[static_cast<size_t>(client)]->gc.get(), layout_.get()};
}

int64_t Bank::Field(const schema::Entity& e, std::string_view table, std::string_view field) const {
  for (const auto& f : layout_->schema().FindTable(table)->fields()) {
    if (f.name() != field) continue;
    auto it = e.fields.find(f.number());
    if (it == e.fields.end() || it->second.empty()) return -1;
    return std::get<int64_t>(it->second.at(0));
  }
  return -1;
}

std::string Bank::StringField(const schema::Entity& e, std::string_view table,
                              std::string_view field) const {
  for (const auto& f : layout_->schema().FindTable(table)->fields()) {
    if (f.name() != field) continue;
    auto it = e.fields.find(f.number());
    if (it == e.fields.end() || it->second.empty()) return "";
    return std::get<std::string>(it->second.at(0));
  }
  return "";
}

schema::Entity Bank::Account(int64_t branch, int64_t id, int64_t balance) const {
  schema::Entity e;
  for (const auto& f : layout_->schema().FindTable("Account")->fields()) {
    if (f.name() == "branch") e.fields[f.number()] = {branch};
    if (f.name() == "id") e.fields[f.number()] = {id};
    if (f.name() == "balance") e.fields[f.number()] = {balance};
  }
  return e;
}

schema::Entity Bank::Record(int64_t branch, const std::string& id, int64_t amount) const {
  schema::Entity e;
  for (const auto& f : layout_->schema().FindTable("Xfer")->fields()) {
    if (f.name() == "branch") e.fields[f.number()] = {branch};
    if (f.name() == "id") e.fields[f.number()] = {id};
    if (f.name() == "amount") e.fields[f.number()] = {amount};
  }
  return e;
}

absl::StatusOr<txn::CommitInfo> Bank::RunNow(int client, int64_t branch, txn::Body body) {
  std::optional<absl::StatusOr<txn::CommitInfo>> r;
  txn::TransactionOptions o;
  o.max_attempts = 50;
  txn::Run(Ctx(client), "Branch", {branch}, o, std::move(body), [&](auto x) { r = std::move(x); });
  SimEnv& env = cluster_->env();
  env.RunUntil(env.now() + 120'000'000, [&] { return r.has_value(); });
  if (!r)
    return absl::DeadlineExceededError(
        StrCat("bank: a transaction on branch ", branch, " never finished"));
  return std::move(*r);
}

absl::Status Bank::Setup() {
  for (auto& c : clients_) {
    const std::string node = StrCat("bank", c->index, "@", DcName(static_cast<size_t>(c->dc)));
    cluster_->net().AddNode(node, c->dc);
    c->gc = std::make_unique<GroupClient>(&cluster_->env(), cluster_->net().TransportFor(node),
                                          cluster_->ClientOptions(c->dc));
  }
  for (size_t i = 0; i < cluster_->size(); ++i) {
    if (cluster_->type(static_cast<int>(i)) == ReplicaType::kWitness) continue;
    const std::string node = StrCat("bankcheck@", DcName(i));
    cluster_->net().AddNode(node, static_cast<int>(i));
    checkers_[static_cast<int>(i)] =
        std::make_unique<GroupClient>(&cluster_->env(), cluster_->net().TransportFor(node),
                                      cluster_->ClientOptions(static_cast<int>(i)));
  }
  for (int64_t b = 1; b <= kBranches; ++b) {
    absl::StatusOr<txn::CommitInfo> r = RunNow(
        0, b,
        [this, b](std::shared_ptr<Transaction> t, absl::AnyInvocable<void(absl::Status)> done) {
          absl::Status s;
          for (int64_t a = 0; s.ok() && a < kAccounts; ++a)
            s = t->Put("Account", Account(b, a, kInitial));
          done(s);
        });
    if (!r.ok())
      return absl::InternalError(StrCat("bank: creating branch ", b, ": ", r.status().message()));
  }
  return absl::OkStatus();
}

void Bank::Start() {
  started_ = true;
  for (auto& c : clients_) {
    c->left = ops_;
    if (c->left > 0) {
      ++running_;
      Next(*c);
    }
  }
}

std::string Bank::Stuck() const {
  std::string out;
  for (const auto& c : clients_)
    if (c->left > 0) out += StrCat(" bank", c->index, " (", c->left, " operations left)");
  return out;
}

void Bank::Next(Client& c) {
  if (c.left == 0) {
    --running_;
    return;
  }
  SimEnv& env = cluster_->env();
  auto op = std::make_unique<Op>();
  op->id = StrCat(c.index, "-", ++next_id_);
  op->from = 1 + static_cast<int64_t>(env.Uniform(kBranches));
  op->to = 1 + (op->from + static_cast<int64_t>(env.Uniform(kBranches - 1))) % kBranches;
  op->amount = 1 + static_cast<int64_t>(env.Uniform(30));
  const uint64_t dice = env.Uniform(3);
  op->kind = dice == 0 ? Op::Kind::kTwoPhase : dice == 1 ? Op::Kind::kQueued : Op::Kind::kCollect;
  Op* p = op.get();
  ops_done_.push_back(std::move(op));
  env.Schedule(absl::Microseconds(env.Uniform(20'000)), [this, &c, p] {
    switch (p->kind) {
      case Op::Kind::kTwoPhase:
        return TwoPhase(c, p, 1);
      case Op::Kind::kQueued:
        return Queued(c, p);
      case Op::Kind::kCollect:
        return Collect(c, p);
    }
  });
}

void Bank::Finish(Client& c, Op* op, absl::Status s) {
  if (op->outcome == Op::Outcome::kRunning) {
    if (s.ok()) {
      op->outcome = Op::Outcome::kOk;
      ++ok_;
    } else if (absl::IsAborted(s) || absl::IsUnavailable(s)) {
      op->outcome = Op::Outcome::kFailed;  // the contract: nothing was written
    } else {
      op->outcome = Op::Outcome::kUnknown;
    }
  }
  if (cluster_->env().tracing())
    cluster_->env().Trace(
        StrCat("bank ", op->id, " ends: ", s.ok() ? "ok" : std::string(s.message())));
  --c.left;
  Next(c);
}

// Both groups read and written, then CommitAcross; a conflict starts over
// (an unknown outcome does not: it may have committed).
void Bank::TwoPhase(Client& c, Op* op, int attempt) {
  Done done = Park([this, &c, op](absl::Status s) { Finish(c, op, s); });
  txn::Context ctx = Ctx(c.index);
  Transaction::Begin(ctx, "Branch", {op->from}, {}, [this, &c, op, attempt, done, ctx](auto a) {
    if (!a.ok()) return (*done)(a.status());
    Transaction::Begin(
        ctx, "Branch", {op->to}, {}, [this, &c, op, attempt, done, ctx, a = *a](auto b) {
          if (!b.ok()) return (*done)(b.status());
          auto tb = *b;
          a->Get(
              "Account", {op->from, int64_t{0}}, [this, &c, op, attempt, done, ctx, a, tb](auto x) {
                if (!x.ok() || !x->has_value())
                  return (*done)(x.ok() ? absl::NotFoundError("no account") : x.status());
                tb->Get("Account", {op->to, int64_t{0}},
                        [this, &c, op, attempt, done, ctx, a, tb, x = **x](auto y) {
                          if (!y.ok() || !y->has_value())
                            return (*done)(y.ok() ? absl::NotFoundError("no account") : y.status());
                          const int64_t fb = Field(x, "Account", "balance");
                          if (fb < op->amount) {
                            op->outcome = Op::Outcome::kNothing;
                            return (*done)(absl::OkStatus());
                          }
                          const std::string rec = "t" + op->id;
                          absl::Status s = a->Put("Account", Account(op->from, 0, fb - op->amount));
                          if (s.ok()) s = a->Put("Xfer", Record(op->from, rec, -op->amount));
                          if (s.ok())
                            s = tb->Put(
                                "Account",
                                Account(op->to, 0, Field(**y, "Account", "balance") + op->amount));
                          if (s.ok()) s = tb->Put("Xfer", Record(op->to, rec, op->amount));
                          if (!s.ok()) return (*done)(s);
                          txn::CommitAcross(
                              ctx, {a, tb},
                              [this, &c, op, attempt, done](absl::StatusOr<txn::CommitInfo> r) {
                                if (absl::IsAborted(r.status()) && attempt < 10) {
                                  SimEnv& env = cluster_->env();
                                  env.Schedule(
                                      absl::Milliseconds(1 + env.Uniform(50)),
                                      [this, &c, op, attempt] { TwoPhase(c, op, attempt + 1); });
                                  return;
                                }
                                (*done)(r.status());
                              });
                        });
              });
        });
  });
}

// Debit and send in the sender's group; deliver now, or leave it to the
// sweeper (as a sender that died would).
void Bank::Queued(Client& c, Op* op) {
  txn::TransactionOptions o;
  o.max_attempts = 20;
  txn::Run(
      Ctx(c.index), "Branch", {op->from}, o,
      [this, op](std::shared_ptr<Transaction> t, absl::AnyInvocable<void(absl::Status)> body_done) {
        Done bd = Park(std::move(body_done));
        t->Get("Account", {op->from, int64_t{0}}, [this, op, t, bd](auto x) {
          if (!x.ok() || !x->has_value())
            return (*bd)(x.ok() ? absl::NotFoundError("no account") : x.status());
          const int64_t fb = Field(**x, "Account", "balance");
          if (fb < op->amount) {
            op->outcome = Op::Outcome::kNothing;
            return (*bd)(absl::OkStatus());
          }
          op->outcome = Op::Outcome::kRunning;  // a retry after a conflict may find the money again
          absl::Status s = t->Put("Account", Account(op->from, 0, fb - op->amount));
          if (s.ok()) s = t->Put("Xfer", Record(op->from, "q" + op->id, -op->amount));
          if (s.ok()) s = t->Send("Branch", {op->to}, "credits", StrCat(op->id, ":", op->amount));
          (*bd)(s);
        });
      },
      [this, &c, op](absl::StatusOr<txn::CommitInfo> r) {
        if (!r.ok() || cluster_->env().Chance(0.5)) return Finish(c, op, r.status());
        absl::StatusOr<std::string> root =
            layout_->GroupRow(*layout_->schema().FindTable("Branch"), {op->from});
        txn::DeliverPending(Ctx(c.index), *root, [this, &c, op](absl::StatusOr<int>) {
          Finish(c, op, absl::OkStatus());
        });
      });
}

// A transaction body that takes one credit from branch `b`'s queue into its
// first account; `*took` says whether there was one (and it was taken).
txn::Body Bank::CollectBody(int64_t b, std::shared_ptr<bool> took) {
  return [this, b, took](std::shared_ptr<Transaction> t,
                         absl::AnyInvocable<void(absl::Status)> body_done) {
    Done bd = Park(std::move(body_done));
    *took = false;
    t->ReadQueue(
        "credits", 1, [this, b, t, bd, took](absl::StatusOr<std::vector<txn::QueueMessage>> msgs) {
          if (!msgs.ok()) return (*bd)(msgs.status());
          if (msgs->empty()) return (*bd)(absl::OkStatus());
          const txn::QueueMessage m = msgs->front();
          const size_t colon = m.body.find(':');
          if (colon == std::string::npos)
            return (*bd)(absl::DataLossError(StrCat("bad credit ", m.body)));
          const std::string id = m.body.substr(0, colon);
          const int64_t amount = std::atoll(m.body.c_str() + colon + 1);
          t->Get("Account", {b, int64_t{0}}, [this, b, t, bd, m, id, amount, took](auto x) {
            if (!x.ok() || !x->has_value())
              return (*bd)(x.ok() ? absl::NotFoundError("no account") : x.status());
            absl::Status s =
                t->Put("Account", Account(b, 0, Field(**x, "Account", "balance") + amount));
            if (s.ok()) s = t->Put("Xfer", Record(b, "q" + id, amount));
            if (s.ok()) s = t->Consume(m);
            *took = s.ok();
            (*bd)(s);
          });
        });
  };
}

void Bank::Collect(Client& c, Op* op) {
  txn::TransactionOptions o;
  o.max_attempts = 20;
  txn::Run(Ctx(c.index), "Branch", {op->to}, o, CollectBody(op->to, std::make_shared<bool>(false)),
           [this, &c, op](absl::StatusOr<txn::CommitInfo> r) { Finish(c, op, r.status()); });
}

absl::StatusOr<Bank::BranchView> Bank::Read(int dc, int64_t branch) {
  txn::Context ctx{checkers_.at(dc).get(), layout_.get()};
  SimEnv& env = cluster_->env();
  auto await = [&env](auto& slot) {
    env.RunUntil(env.now() + 60'000'000, [&] { return slot.has_value(); });
    return slot.has_value();
  };
  std::optional<absl::StatusOr<std::shared_ptr<Transaction>>> began;
  Transaction::Begin(ctx, "Branch", {branch}, {}, [&](auto t) { began = std::move(t); });
  if (!await(began)) return absl::DeadlineExceededError("bank: a read never began");
  MS_RETURN_IF_ERROR(began->status());
  std::shared_ptr<Transaction> t = **began;
  BranchView view;
  std::optional<absl::StatusOr<txn::QueryResult>> accounts, records, indexed;
  t->Query("Account", {branch}, {}, [&](auto r) { accounts = std::move(r); });
  if (!await(accounts)) return absl::DeadlineExceededError("bank: a query never finished");
  MS_RETURN_IF_ERROR(accounts->status());
  for (const schema::Entity& e : (*accounts)->entities)
    view.balances[Field(e, "Account", "id")] = Field(e, "Account", "balance");
  t->Query("Xfer", {branch}, {}, [&](auto r) { records = std::move(r); });
  if (!await(records)) return absl::DeadlineExceededError("bank: a query never finished");
  MS_RETURN_IF_ERROR(records->status());
  for (const schema::Entity& e : (*records)->entities)
    view.records[StringField(e, "Xfer", "id")] = Field(e, "Xfer", "amount");
  t->IndexQuery("AccountsByBalance", {branch}, {}, [&](auto r) { indexed = std::move(r); });
  if (!await(indexed)) return absl::DeadlineExceededError("bank: an index query never finished");
  MS_RETURN_IF_ERROR(indexed->status());
  view.indexed = (*indexed)->entities.size();
  int64_t previous = INT64_MIN;
  for (const schema::Entity& e : (*indexed)->entities) {
    const int64_t balance = Field(e, "Account", "balance");
    if (balance < previous) view.index_ordered = false;
    previous = balance;
  }
  return view;
}

absl::Status Bank::SettleAndCheck() {
  SimEnv& env = cluster_->env();
  // In-doubt two-phase transactions time out; the next write of each group
  // settles them. Then every outbox is delivered and every credit collected.
  env.RunUntil(env.now() + absl::ToInt64Microseconds(txn::kPreparedTimeout) + 1'000'000);
  auto touch = [this](int64_t b) {
    return [this, b](std::shared_ptr<Transaction> t, absl::AnyInvocable<void(absl::Status)> done) {
      schema::Entity branch;
      for (const auto& f : layout_->schema().FindTable("Branch")->fields())
        if (f.name() == "id") branch.fields[f.number()] = {b};
      done(t->Put("Branch", branch));
    };
  };
  for (int64_t b = 1; b <= kBranches; ++b) {
    absl::StatusOr<txn::CommitInfo> r = RunNow(0, b, touch(b));
    if (!r.ok())
      return absl::InternalError(StrCat("bank: settling branch ", b, ": ", r.status().message()));
  }
  for (int sweep = 0; sweep < 2; ++sweep) {
    std::optional<absl::StatusOr<int>> delivered;
    txn::SweepQueues(Ctx(0), [&](auto r) { delivered = std::move(r); });
    env.RunUntil(env.now() + 120'000'000, [&] { return delivered.has_value(); });
    if (!delivered || !delivered->ok())
      return absl::InternalError(
          StrCat("bank: sweeping the queues failed: ",
                 delivered ? delivered->status().message() : "never finished"));
  }
  for (int64_t b = 1; b <= kBranches; ++b) {
    for (int i = 0; i < 1000; ++i) {
      auto took = std::make_shared<bool>(false);
      absl::StatusOr<txn::CommitInfo> r = RunNow(0, b, CollectBody(b, took));
      if (!r.ok())
        return absl::InternalError(
            StrCat("bank: collecting credits at branch ", b, ": ", r.status().message()));
      if (!*took) break;
    }
  }

  // The checks, at every data replica; the replicas must agree.
  std::optional<std::map<int64_t, BranchView>> first;
  for (size_t i = 0; i < cluster_->size(); ++i) {
    const int dc = static_cast<int>(i);
    if (cluster_->type(dc) == ReplicaType::kWitness) continue;
    std::map<int64_t, BranchView> views;
    int64_t total = 0;
    for (int64_t b = 1; b <= kBranches; ++b) {
      MS_ASSIGN_OR_RETURN(BranchView v, Read(dc, b));
      const std::string where = StrCat("bank at ", DcName(i), ", branch ", b, ": ");
      if (v.balances.size() != static_cast<size_t>(kAccounts))
        return absl::InternalError(StrCat(where, v.balances.size(), " accounts, not ", kAccounts));
      for (const auto& [a, balance] : v.balances) {
        if (balance < 0)
          return absl::InternalError(StrCat(where, "account ", a, " is overdrawn: ", balance));
        total += balance;
      }
      if (v.indexed != v.balances.size() || !v.index_ordered)
        return absl::InternalError(StrCat(where, "the balance index lists ", v.indexed, " entries",
                                          v.index_ordered ? "" : " out of order", " for ",
                                          v.balances.size(), " accounts"));
      views[b] = std::move(v);
    }
    if (total != kBranches * kAccounts * kInitial)
      return absl::InternalError(
          StrCat("bank at ", DcName(i), ": the branches hold ", total, ", not ",
                 kBranches * kAccounts * kInitial,
                 " (money made or lost: a credit consumed twice or a transfer half done)"));
    for (const auto& op : ops_done_) {
      if (op->kind == Op::Kind::kCollect) continue;
      const std::string rec = (op->kind == Op::Kind::kTwoPhase ? "t" : "q") + op->id;
      const bool debited = views[op->from].records.count(rec) > 0;
      const bool credited = views[op->to].records.count(rec) > 0;
      const std::string what = StrCat(
          "bank at ", DcName(i), ": ", op->kind == Op::Kind::kTwoPhase ? "two-phase" : "queued",
          " transfer ", op->id, " of ", op->amount, " from branch ", op->from, " to ", op->to);
      if (debited != credited)
        return absl::InternalError(StrCat(
            what,
            debited ? " left the sender but never arrived" : " arrived but never left the sender",
            op->kind == Op::Kind::kQueued ? " (a queued credit lost or consumed without its send)"
                                          : " (not all or nothing)"));
      if (op->outcome == Op::Outcome::kOk && !debited)
        return absl::InternalError(StrCat(what, " was acknowledged but is not there"));
      if ((op->outcome == Op::Outcome::kFailed || op->outcome == Op::Outcome::kNothing) && debited)
        return absl::InternalError(StrCat(what, " failed or moved nothing, but is there"));
      if (debited &&
          (views[op->from].records[rec] != -op->amount || views[op->to].records[rec] != op->amount))
        return absl::InternalError(StrCat(what, ": the records say ", views[op->from].records[rec],
                                          " and ", views[op->to].records[rec]));
    }
    if (!first) {
      first = std::move(views);
      continue;
    }
    for (const auto& [b, v] : *first) {
      const BranchView& w = views[b];
      if (v.balances != w.balances || v.records != w.records)
        return absl::InternalError(
            StrCat("bank: replicas disagree on branch ", b, " (", DcName(i), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace megastore::sim
