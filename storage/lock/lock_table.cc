#include "storage/lock/lock_table.h"

#include <cmath>

#include "base/checksum.h"
#include "base/coding.h"
#include "base/file.h"
#include "base/status.h"
#include "base/strings.h"
#include "storage/lock/lock.pb.h"

namespace megastore::storage::lock {

LockTable::LockTable(Env* env, LockTableOptions options) : env_(env), options_(std::move(options)) {
  if (options_.quiet_period > absl::ZeroDuration())
    quiet_until_ = env_->MonotonicMicros() + absl::ToInt64Microseconds(options_.quiet_period);
}

absl::StatusOr<std::unique_ptr<LockTable>> LockTable::Open(Env* env, LockTableOptions options) {
  if (options.max_lease <= absl::ZeroDuration())
    return absl::InvalidArgumentError("lock table: max_lease must be positive");
  if (!(options.max_clock_drift >= 0 && options.max_clock_drift < 0.1))
    return absl::InvalidArgumentError(
        StrCat("lock table: max_clock_drift must be in [0, 0.1), got ", options.max_clock_drift));
  int64_t longest = 0;
  if (!options.state_file.empty()) {
    absl::StatusOr<std::string> data = ReadFileToString(options.state_file);
    if (data.ok()) {
      LockTableState state;
      if (data->size() < 4 ||
          crc32c::Unmask(DecodeFixed32(data->data())) !=
              crc32c::Value(std::string_view(*data).substr(4)) ||
          !state.ParseFromString(data->substr(4)) || state.longest_lease_micros() < 0) {
        return absl::DataLossError(
            StrCat("lock table state ", options.state_file,
                   " is damaged: the longest lease its last run granted is unknown, so it cannot "
                   "know how long to "
                   "stay quiet. Wait longer than any coordinator lease, then remove the file"));
      }
      longest = state.longest_lease_micros();
      options.quiet_period = std::max(
          options.quiet_period, QuietPeriod(absl::Microseconds(longest), options.max_clock_drift));
    } else if (!absl::IsNotFound(data.status())) {
      return data.status();
    } else if (!options.new_directory) {
      // Granted by a run that kept no file (or lost it): assume the most.
      options.quiet_period =
          std::max(options.quiet_period, QuietPeriod(options.max_lease, options.max_clock_drift));
    }
  }
  std::unique_ptr<LockTable> t(new LockTable(env, std::move(options)));
  absl::MutexLock lock(&t->mu_);
  t->recorded_longest_ = longest;
  if (!t->options_.state_file.empty() && t->options_.new_directory) {
    // Record "nothing granted yet" so a restart knows this directory was used.
    MS_RETURN_IF_ERROR(t->WriteStateLocked(0));
  }
  return t;
}

absl::Status LockTable::WriteStateLocked(int64_t longest_micros) {
  LockTableState state;
  state.set_longest_lease_micros(longest_micros);
  const std::string body = state.SerializeAsString();
  std::string data;
  PutFixed32(&data, crc32c::Mask(crc32c::Value(body)));
  data += body;
  MS_RETURN_IF_ERROR(WriteFileAtomically(options_.state_file, data));
  recorded_longest_ = longest_micros;
  return absl::OkStatus();
}

absl::Status LockTable::RecordLeaseLocked(absl::Duration lease) {
  const int64_t micros = absl::ToInt64Microseconds(lease);
  if (options_.state_file.empty() || micros <= recorded_longest_) return absl::OkStatus();
  // Durable before the grant: a restart must know to wait this long.
  return WriteStateLocked(micros);
}

LockTable::Holder LockTable::HolderLocked(std::string_view name) {
  Holder h;
  const int64_t now = env_->MonotonicMicros();
  if (now < quiet_until_) {
    // A lease of the previous incarnation may still run.
    h.held = true;
    h.quiet = true;
    h.remaining = absl::Microseconds(quiet_until_ - now);
    return h;
  }
  auto it = leases_.find(name);
  if (it == leases_.end()) return h;
  if (it->second.expires <= now) {
    leases_.erase(it);
    return h;
  }
  h.held = true;
  h.owner = it->second.owner;
  h.remaining = absl::Microseconds(it->second.expires - now);
  h.grant = it->second.grant;
  return h;
}

absl::StatusOr<LockTable::Holder> LockTable::Acquire(std::string_view name, std::string_view owner,
                                                     absl::Duration lease) {
  if (lease <= absl::ZeroDuration() || lease > options_.max_lease)
    return absl::InvalidArgumentError(StrCat(
        "lock ", name, ": a lease of ", absl::FormatDuration(lease), " is outside (0, ",
        absl::FormatDuration(options_.max_lease), "], the longest this lock service grants"));
  absl::MutexLock lock(&mu_);
  Holder h = HolderLocked(name);
  if (h.quiet || (h.held && h.owner != owner)) return h;
  MS_RETURN_IF_ERROR(RecordLeaseLocked(lease));
  Lease& l = leases_[std::string(name)];
  if (!h.held) {
    l.grant = 0;
    while (l.grant == 0) l.grant = env_->Random64();
  }
  l.owner = std::string(owner);
  l.expires = env_->MonotonicMicros() + absl::ToInt64Microseconds(lease);
  return HolderLocked(name);
}

LockTable::Holder LockTable::Query(std::string_view name) {
  absl::MutexLock lock(&mu_);
  return HolderLocked(name);
}

void LockTable::Release(std::string_view name, std::string_view owner) {
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(name);
  if (it != leases_.end() && it->second.owner == owner) leases_.erase(it);
}

void LockTable::Serve(std::string_view method, std::string request, Responder respond) {
  LockReply reply;
  Holder h;
  if (method == "lock.Acquire") {
    AcquireRequest r;
    if (!r.ParseFromString(request) || r.name().empty() || r.owner().empty() ||
        r.lease_micros() <= 0) {
      respond(absl::InvalidArgumentError(
          "lock.Acquire: malformed request (needs a name, an owner and a positive lease)"));
      return;
    }
    absl::StatusOr<Holder> got = Acquire(r.name(), r.owner(), absl::Microseconds(r.lease_micros()));
    if (!got.ok()) return respond(got.status());
    h = std::move(*got);
    reply.set_granted(h.held && !h.quiet && h.owner == r.owner());
    if (reply.granted()) reply.set_grant(h.grant);
  } else if (method == "lock.Query" || method == "lock.Release") {
    LockRequest r;
    if (!r.ParseFromString(request) || r.name().empty()) {
      respond(absl::InvalidArgumentError(StrCat(method, ": malformed request")));
      return;
    }
    if (method == "lock.Release") Release(r.name(), r.owner());
    h = Query(r.name());
  } else {
    respond(absl::UnimplementedError(StrCat("lock service has no method ", method)));
    return;
  }
  reply.set_held(h.held);
  reply.set_holder(h.quiet ? "(unknown: the lock service restarted and waits out old leases)"
                           : h.owner);
  reply.set_remaining_micros(absl::ToInt64Microseconds(h.remaining));
  respond(reply.SerializeAsString());
}

}  // namespace megastore::storage::lock
