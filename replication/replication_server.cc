#include "replication/replication_server.h"

#include "base/strings.h"

namespace megastore::replication {

namespace {

template <typename Request>
bool Parse(std::string_view method, const std::string& bytes, Request* out, Responder& respond) {
  if (out->ParseFromString(bytes)) return true;
  respond(absl::InvalidArgumentError(StrCat(method, ": malformed request")));
  return false;
}

template <typename Reply>
auto Answer(Responder respond) {
  return [respond = std::move(respond)](absl::StatusOr<Reply> r) mutable {
    if (!r.ok()) return respond(r.status());
    respond(r->SerializeAsString());
  };
}

std::string Key(const GroupRef& g) {
  std::string k = g.table();
  k.push_back('\0');
  k += g.root();
  return k;
}

}  // namespace

ReplicationServer::ReplicationServer(Env* env, Transport* transport,
                                     storage::BigtableClient* bigtable,
                                     ReplicationServerOptions options)
    : env_(env),
      options_(std::move(options)),
      replica_(bigtable, options_.cluster.replicas[options_.cluster.local].type),
      client_(env, transport, options_.cluster) {}

ReplicationServer::~ReplicationServer() { Stop(); }

void ReplicationServer::Serve(std::string_view method, std::string request, Responder respond) {
  if (method == "repl.Paxos") {
    PaxosRequest req;
    if (!Parse(method, request, &req, respond)) return;
    Note(req.group());
    replica_.Paxos(std::move(req), Answer<PaxosReply>(std::move(respond)));
  } else if (method == "repl.State") {
    StateRequest req;
    if (!Parse(method, request, &req, respond)) return;
    replica_.State(req.group(), Answer<StateReply>(std::move(respond)));
  } else if (method == "repl.ReadLog") {
    ReadLogRequest req;
    if (!Parse(method, request, &req, respond)) return;
    replica_.ReadLog(std::move(req), Answer<ReadLogReply>(std::move(respond)));
  } else if (method == "repl.Apply") {
    ApplyRequest req;
    if (!Parse(method, request, &req, respond)) return;
    replica_.Apply(std::move(req), Answer<ApplyReply>(std::move(respond)));
  } else if (method == "repl.Read") {
    ReadRequest req;
    if (!Parse(method, request, &req, respond)) return;
    replica_.Read(std::move(req), Answer<ReadReply>(std::move(respond)));
  } else if (method == "repl.ScanIndex") {
    ScanIndexRequest req;
    if (!Parse(method, request, &req, respond)) return;
    replica_.ScanIndex(std::move(req), Answer<ScanReply>(std::move(respond)));
  } else if (method == "repl.Scan") {
    ScanRequest req;
    if (!Parse(method, request, &req, respond)) return;
    replica_.Scan(std::move(req), Answer<ScanReply>(std::move(respond)));
  } else {
    respond(absl::UnimplementedError(StrCat("replication server has no method ", method)));
  }
}

void ReplicationServer::Note(const GroupRef& group) {
  absl::MutexLock lock(&mu_);
  Seen& s = seen_[Key(group)];
  s.group = group;
  s.last = env_->MonotonicMicros();
}

void ReplicationServer::Start() {
  absl::MutexLock lock(&mu_);
  if (running_) return;
  running_ = true;
  timer_ = env_->Schedule(options_.sweep_interval, [this] { Tick(); });
}

void ReplicationServer::Stop() {
  absl::MutexLock lock(&mu_);
  running_ = false;
  if (timer_ != 0) env_->Cancel(timer_);
  timer_ = 0;
}

void ReplicationServer::Tick() {
  {
    absl::MutexLock lock(&mu_);
    if (!running_) return;
    timer_ = env_->Schedule(options_.sweep_interval, [this] { Tick(); });
    if (sweeping_) return;
    sweeping_ = true;
  }
  Sweep([this] {
    absl::MutexLock lock(&mu_);
    sweeping_ = false;
  });
}

void ReplicationServer::Sweep(absl::AnyInvocable<void()> done) {
  std::vector<GroupRef> due;
  {
    absl::MutexLock lock(&mu_);
    const int64_t cutoff = env_->MonotonicMicros() - absl::ToInt64Microseconds(options_.sweep_age);
    for (const auto& [key, seen] : seen_)
      if (seen.last <= cutoff) due.push_back(seen.group);
  }
  struct Pending {
    absl::Mutex mu;
    size_t left;
    absl::AnyInvocable<void()> done;
  };
  auto pending = std::make_shared<Pending>();
  pending->left = due.size() + 1;
  pending->done = std::move(done);
  auto finish_one = [pending] {
    absl::AnyInvocable<void()> done;
    {
      absl::MutexLock lock(&pending->mu);
      if (--pending->left > 0) return;
      done = std::move(pending->done);
    }
    if (done) done();
  };
  const int local = options_.cluster.local;
  for (const GroupRef& group : due) {
    replica_.State(group, [this, group, local, finish_one](absl::StatusOr<StateReply> s) mutable {
      if (!s.ok()) return finish_one();
      if (s->top() <= s->applied().position()) {
        // Complete here: forget it until new traffic arrives.
        {
          absl::MutexLock lock(&mu_);
          auto it = seen_.find(Key(group));
          const int64_t cutoff =
              env_->MonotonicMicros() - absl::ToInt64Microseconds(options_.sweep_age);
          if (it != seen_.end() && it->second.last <= cutoff) seen_.erase(it);
        }
        return finish_one();
      }
      client_.CatchUp(group, local, s->top(),
                      [finish_one](absl::StatusOr<LogPosition>) mutable { finish_one(); });
    });
  }
  finish_one();
}

}  // namespace megastore::replication
