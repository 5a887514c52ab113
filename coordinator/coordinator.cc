#include "coordinator/coordinator.h"

#include "base/buggify.h"
#include "base/logging.h"
#include "base/strings.h"
#include "coordinator/coordinator.pb.h"
#include "storage/lock/lock.pb.h"
#include "storage/lock/lock_table.h"

namespace megastore::coordinator {

MS_FAULT_POINT(kCheckSaysInvalid, "coordinator: Check answers \"not valid\" for a valid group");
MS_FAULT_POINT(kValidateRefused, "coordinator: a reader's Validate is refused");

namespace {

std::string GroupKey(const CoordinatorRequest& r) {
  std::string k = r.table();
  k.push_back('\0');
  k += r.root();
  return k;
}

uint64_t NewEpoch(Env* env) {
  uint64_t e = 0;
  while (e == 0) e = env->Random64();
  return e;
}

}  // namespace

std::string LockName(std::string_view replica) { return StrCat("coordinator/", replica); }

absl::Status CoordinatorOptions::Validate() const {
  if (!(max_clock_drift >= 0 && max_clock_drift < 0.1))
    return absl::InvalidArgumentError(
        StrCat("coordinator: max_clock_drift must be in [0, 0.1), got ", max_clock_drift));
  if (renew_interval <= absl::ZeroDuration() || rpc_timeout <= absl::ZeroDuration())
    return absl::InvalidArgumentError(
        "coordinator: renew_interval and rpc_timeout must be positive");
  const absl::Duration counted = storage::lock::HolderLease(lease, max_clock_drift);
  if (renew_interval + rpc_timeout >= counted)
    return absl::InvalidArgumentError(
        StrCat("coordinator: a lease of ", absl::FormatDuration(lease), " (counted as ",
               absl::FormatDuration(counted),
               " after the clock-drift margin) does not outlast a renew interval of ",
               absl::FormatDuration(renew_interval), " plus an RPC timeout of ",
               absl::FormatDuration(rpc_timeout),
               ": its locks would lapse between renewals; make the lease longer"));
  return absl::OkStatus();
}

Coordinator::Coordinator(Env* env, Transport* transport, CoordinatorOptions options)
    : env_(env),
      transport_(transport),
      options_(std::move(options)),
      owner_(StrCat(options_.name, "#", env->Random64())) {
  absl::MutexLock lock(&mu_);
  epoch_ = NewEpoch(env_);
  held_until_.assign(options_.lock_services.size(), 0);
  grant_.assign(options_.lock_services.size(), 0);
}

Coordinator::~Coordinator() {
  Stop();
  // A renewal popped off the timer queue (Cancel cannot stop it) or a lock
  // service's late answer finds the coordinator gone.
  life_->End();
}

void Coordinator::Start() {
  uint64_t generation;
  {
    absl::MutexLock lock(&mu_);
    if (running_) return;
    running_ = true;
    generation = ++generation_;
  }
  Renew(generation);
}

void Coordinator::Stop() {
  absl::MutexLock lock(&mu_);
  running_ = false;
  ++generation_;  // a renewal already popped off the timer queue ends there
  if (timer_ != 0) env_->Cancel(timer_);
  timer_ = 0;
  ResetLocked();
  was_serving_ = false;
}

void Coordinator::PauseRenewals(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  paused_until_ = env_->MonotonicMicros() + absl::ToInt64Microseconds(d);
}

bool Coordinator::ServingLocked() {
  const int64_t now = env_->MonotonicMicros();
  size_t held = 0;
  for (int64_t until : held_until_) held += until > now ? 1 : 0;
  // Alone (a one-datacenter cluster), no writer elsewhere could miss it.
  const bool serving = running_ && (held_until_.empty() || held >= held_until_.size() / 2 + 1);
  // Both ways: what a reader checked before the change must not validate
  // after it (a lapse may have let a writer skip this coordinator).
  if (was_serving_ != serving) ResetLocked();
  was_serving_ = serving;
  return serving;
}

void Coordinator::ResetLocked() {
  groups_.clear();
  epoch_ = NewEpoch(env_);
  counts_.resets++;
}

bool Coordinator::serving() {
  absl::MutexLock lock(&mu_);
  return ServingLocked();
}

uint64_t Coordinator::epoch() {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

void Coordinator::Renew(uint64_t generation) {
  bool paused;
  {
    absl::MutexLock lock(&mu_);
    if (!running_ || generation != generation_) return;
    ServingLocked();
    paused = env_->MonotonicMicros() < paused_until_;
    timer_ = env_->Schedule(options_.renew_interval, [life = life_, this, generation] {
      Lifetime::Run(life, [&] { Renew(generation); });
    });
  }
  if (paused) return;
  const int64_t sent = env_->MonotonicMicros();
  for (size_t i = 0; i < options_.lock_services.size(); ++i) {
    storage::lock::AcquireRequest req;
    req.set_name(LockName(options_.name));
    req.set_owner(owner_);
    req.set_lease_micros(absl::ToInt64Microseconds(options_.lease));
    transport_->Call(
        options_.lock_services[i], "lock.Acquire", req.SerializeAsString(), options_.rpc_timeout,
        [life = life_, this, i, sent](absl::StatusOr<std::string> r) {
          Lifetime::Entry in(life);
          if (!in) return;
          storage::lock::LockReply reply;
          // Grant id 0: a lock service too old to say whether
          // the lock was free meanwhile; its grant counts for nothing.
          if (!r.ok() || !reply.ParseFromString(*r) || !reply.granted()) return;
          absl::MutexLock lock(&mu_);
          if (!running_) return;
          if (reply.grant() == 0) {
            if (!warned_no_grant_id_)
              MS_LOG_ERROR(
                  "coordinator {}: lock service {} grants without grant ids (an older "
                  "version?); its lock is not counted until it is upgraded",
                  options_.name, options_.lock_services[i]);
            warned_no_grant_id_ = true;
            return;
          }
          if (reply.grant() != grant_[i]) {
            // A new grant: the lock was free at that service
            // since the last one we saw, and a writer may
            // have counted on that instead of invalidating us.
            grant_[i] = reply.grant();
            ResetLocked();
          }
          held_until_[i] =
              std::max(held_until_[i], sent + absl::ToInt64Microseconds(storage::lock::HolderLease(
                                                  options_.lease, options_.max_clock_drift)));
          ServingLocked();
        });
  }
}

Coordinator::Stats Coordinator::stats() {
  absl::MutexLock lock(&mu_);
  Stats s = counts_;
  s.groups = groups_.size();
  for (const auto& [key, g] : groups_) s.valid_groups += g.valid ? 1 : 0;
  return s;
}

void Coordinator::Serve(std::string_view method, std::string request, Responder respond) {
  if (method == "coord.Lock" || method == "coord.Unlock")
    return advisory_locks_.Serve(method, std::move(request), std::move(respond));
  CoordinatorRequest req;
  if (!req.ParseFromString(request) || req.table().empty() || req.root().empty()) {
    respond(absl::InvalidArgumentError(
        StrCat(method, ": malformed request (needs a table and a root row)")));
    return;
  }
  CoordinatorReply reply;
  {
    absl::MutexLock lock(&mu_);
    const bool serving = ServingLocked();
    reply.set_epoch(epoch_);
    if (method == "coord.Check") {
      auto it = groups_.find(GroupKey(req));
      // A coordinator may always answer "not known to be up to date": the
      // reader then asks a majority.
      reply.set_valid(serving && it != groups_.end() && it->second.valid &&
                      !kCheckSaysInvalid.Fire());
      counts_.checks++;
      if (reply.valid()) counts_.checks_valid++;
    } else if (method == "coord.Invalidate") {
      counts_.invalidations++;
      GroupState& g = groups_[GroupKey(req)];
      g.valid = false;
      g.invalidated = std::max(g.invalidated, req.position());
      reply.set_applied(true);
    } else if (method == "coord.Validate") {
      auto it = groups_.find(GroupKey(req));
      const uint64_t invalidated = it == groups_.end() ? 0 : it->second.invalidated;
      if (serving && req.epoch() == epoch_ && invalidated <= req.position() &&
          !kValidateRefused.Fire()) {
        GroupState& g = groups_[GroupKey(req)];
        g.valid = true;
        reply.set_applied(true);
        reply.set_valid(true);
        counts_.validations++;
      }
    } else {
      respond(absl::UnimplementedError(StrCat("coordinator has no method ", method)));
      return;
    }
  }
  respond(reply.SerializeAsString());
}

}  // namespace megastore::coordinator
