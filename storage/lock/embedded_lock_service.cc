#include "storage/lock/embedded_lock_service.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "base/checksum.h"
#include "base/coding.h"
#include "base/file.h"
#include "base/strings.h"
#include "storage/lock/lock.pb.h"

namespace megastore::storage::lock {

absl::Status CheckPath(const std::string& path) {
  if (path.empty() || path[0] != '/')
    return absl::InvalidArgumentError(
        StrCat("lock service path \"", EscapeBytes(path), "\" does not start with /"));
  if (path.size() > 4096)
    return absl::InvalidArgumentError(
        StrCat("lock service path of ", path.size(), " bytes is longer than 4096"));
  return absl::OkStatus();
}

namespace {
constexpr char kStateFile[] = "lockservice.state";
}  // namespace

class EmbeddedLockService::EmbeddedWatch : public LockService::Watch {
 public:
  EmbeddedWatch(EmbeddedLockService* service, uint64_t id) : service_(service), id_(id) {}
  ~EmbeddedWatch() override { Cancel(); }
  void Cancel() override {
    if (service_ == nullptr) return;
    service_->CancelWatch(id_);
    service_ = nullptr;
  }

 private:
  EmbeddedLockService* service_;
  const uint64_t id_;
};

absl::StatusOr<std::unique_ptr<EmbeddedLockService>> EmbeddedLockService::Open(Env* env,
                                                                               std::string dir) {
  std::unique_ptr<EmbeddedLockService> s(new EmbeddedLockService(env, std::move(dir)));
  s->guard_ = std::make_shared<TimerGuard>();
  {
    absl::MutexLock lock(&s->guard_->mu);
    s->guard_->service = s.get();
  }
  if (!s->dir_.empty()) {
    if (absl::Status st = s->Load(); !st.ok()) return st;
  }
  return s;
}

EmbeddedLockService::~EmbeddedLockService() {
  absl::MutexLock lock(&guard_->mu);
  guard_->service = nullptr;
}

absl::Status EmbeddedLockService::Load() {
  const std::string path = StrCat(dir_, "/", kStateFile);
  absl::StatusOr<std::string> read = ReadFileToString(path);
  if (absl::IsNotFound(read.status())) return absl::OkStatus();  // a new service
  if (!read.ok()) return read.status();                          // unreadable is not empty
  const std::string& data = *read;
  LockServiceState state;
  if (data.size() < 4 ||
      crc32c::Unmask(DecodeFixed32(data.data())) !=
          crc32c::Value(std::string_view(data).substr(4)) ||
      !state.ParseFromArray(data.data() + 4, static_cast<int>(data.size() - 4)))
    return absl::DataLossError(
        StrCat(path,
               " is damaged (checksum or format): the lock service's files cannot be "
               "trusted; restore it from a backup or remove it to start empty"));
  absl::MutexLock lock(&mu_);
  revision_ = state.revision();
  next_session_ = state.next_session();
  for (const auto& f : state.files())
    files_[f.path()] = FileInfo{f.path(), f.contents(), f.version(), 0};
  return absl::OkStatus();
}

absl::Status EmbeddedLockService::SaveLocked() {
  if (dir_.empty()) return absl::OkStatus();
  LockServiceState state;
  state.set_revision(revision_);
  state.set_next_session(next_session_);
  for (const auto& [path, f] : files_) {
    if (f.session != 0) continue;  // ephemeral: dies with its session anyway
    auto* out = state.add_files();
    out->set_path(path);
    out->set_contents(f.contents);
    out->set_version(f.version);
  }
  std::string body = state.SerializeAsString();
  std::string data;
  PutFixed32(&data, crc32c::Mask(crc32c::Value(body)));
  data += body;
  // Atomic and durable: the tmp file synced, renamed, the directory synced.
  return WriteFileAtomically(StrCat(dir_, "/", kStateFile), data);
}

int64_t EmbeddedLockService::PutLocked(const std::string& path, std::string contents,
                                       SessionId session) {
  auto old = files_.find(path);
  if (old != files_.end() && old->second.session != 0 && old->second.session != session) {
    auto s = sessions_.find(old->second.session);
    if (s != sessions_.end()) s->second.files.erase(path);
  }
  const int64_t version = ++revision_;
  files_[path] = FileInfo{path, contents, version, session};
  if (session != 0) sessions_[session].files.insert(path);
  RecordLocked(WatchEvent{WatchEvent::Type::kPut, path, std::move(contents), version});
  return version;
}

void EmbeddedLockService::RecordLocked(WatchEvent event) {
  history_.push_back(event);
  if (history_.size() > kHistory) history_.pop_front();
  pending_.push_back(Queued{std::move(event), 0});
}

void EmbeddedLockService::DeleteLocked(const std::string& path) {
  auto it = files_.find(path);
  if (it == files_.end()) return;
  if (it->second.session != 0) {
    auto s = sessions_.find(it->second.session);
    if (s != sessions_.end()) s->second.files.erase(path);
  }
  files_.erase(it);
  RecordLocked(WatchEvent{WatchEvent::Type::kDelete, path, "", ++revision_});
}

void EmbeddedLockService::EndSessionLocked(SessionId id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  const std::set<std::string> files = it->second.files;
  for (const std::string& path : files) DeleteLocked(path);
  sessions_.erase(id);
}

void EmbeddedLockService::ExpireLocked() {
  const int64_t now = env_->MonotonicMicros();
  std::vector<SessionId> ended;
  for (const auto& [id, s] : sessions_)
    if (s.expires <= now) ended.push_back(id);
  for (SessionId id : ended) EndSessionLocked(id);
}

void EmbeddedLockService::ScheduleExpiry(SessionId, absl::Duration after) {
  std::weak_ptr<TimerGuard> weak = guard_;
  env_->Schedule(after, [weak] {
    std::shared_ptr<TimerGuard> g = weak.lock();
    if (g == nullptr) return;
    absl::MutexLock lock(&g->mu);
    if (g->service == nullptr) return;
    {
      absl::MutexLock inner(&g->service->mu_);
      g->service->ExpireLocked();
    }
    g->service->Deliver();
  });
}

void EmbeddedLockService::OpenSession(absl::Duration ttl,
                                      Callback<absl::StatusOr<SessionId>> done) {
  if (ttl <= absl::ZeroDuration())
    return done(absl::InvalidArgumentError("a session's ttl must be positive"));
  SessionId id;
  {
    absl::MutexLock lock(&mu_);
    id = next_session_++;
    Session& s = sessions_[id];
    s.ttl = ttl;
    s.expires = env_->MonotonicMicros() + absl::ToInt64Microseconds(ttl);
    // Session ids are never reused, across restarts too.
    if (absl::Status st = SaveLocked(); !st.ok()) {
      sessions_.erase(id);
      return done(st);
    }
  }
  ScheduleExpiry(id, ttl);
  done(id);
}

void EmbeddedLockService::KeepAlive(SessionId session, Callback<absl::Status> done) {
  std::optional<absl::Duration> ttl;
  {
    absl::MutexLock lock(&mu_);
    ExpireLocked();
    auto it = sessions_.find(session);
    if (it != sessions_.end()) {
      ttl = it->second.ttl;
      it->second.expires = env_->MonotonicMicros() + absl::ToInt64Microseconds(*ttl);
    }
  }
  Deliver();  // what the expiry deleted
  if (!ttl.has_value())
    return done(absl::NotFoundError(StrCat("lock service session ", session, " has ended")));
  ScheduleExpiry(session, *ttl);
  done(absl::OkStatus());
}

void EmbeddedLockService::CloseSession(SessionId session, Callback<absl::Status> done) {
  {
    absl::MutexLock lock(&mu_);
    EndSessionLocked(session);
  }
  Deliver();
  done(absl::OkStatus());
}

void EmbeddedLockService::Put(std::string path, std::string contents, SessionId session,
                              Callback<absl::StatusOr<int64_t>> done) {
  if (absl::Status st = CheckPath(path); !st.ok()) return done(st);
  absl::StatusOr<int64_t> result;
  {
    absl::MutexLock lock(&mu_);
    ExpireLocked();
    if (session != 0 && !sessions_.count(session)) {
      result = absl::NotFoundError(StrCat("lock service session ", session, " has ended"));
    } else {
      result = PutLocked(path, std::move(contents), session);
      if (absl::Status st = SaveLocked(); !st.ok()) result = st;
    }
  }
  Deliver();
  done(std::move(result));
}

void EmbeddedLockService::Create(std::string path, std::string contents, SessionId session,
                                 Callback<absl::StatusOr<bool>> done) {
  if (absl::Status st = CheckPath(path); !st.ok()) return done(st);
  absl::StatusOr<bool> result;
  {
    absl::MutexLock lock(&mu_);
    ExpireLocked();
    if (session != 0 && !sessions_.count(session)) {
      result = absl::NotFoundError(StrCat("lock service session ", session, " has ended"));
    } else if (files_.count(path)) {
      result = false;
    } else {
      PutLocked(path, std::move(contents), session);
      result = true;
      if (absl::Status st = SaveLocked(); !st.ok()) result = st;
    }
  }
  Deliver();
  done(std::move(result));
}

void EmbeddedLockService::Get(std::string path,
                              Callback<absl::StatusOr<std::optional<FileInfo>>> done) {
  if (absl::Status st = CheckPath(path); !st.ok()) return done(st);
  std::optional<FileInfo> out;
  {
    absl::MutexLock lock(&mu_);
    ExpireLocked();
    auto it = files_.find(path);
    if (it != files_.end()) out = it->second;
  }
  Deliver();
  done(std::move(out));
}

void EmbeddedLockService::List(std::string prefix, Callback<absl::StatusOr<Listing>> done) {
  Listing out;
  {
    absl::MutexLock lock(&mu_);
    ExpireLocked();
    for (auto it = files_.lower_bound(prefix);
         it != files_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
      out.files.push_back(it->second);
    out.revision = revision_;
  }
  Deliver();
  done(std::move(out));
}

void EmbeddedLockService::Delete(std::string path, int64_t if_version,
                                 Callback<absl::StatusOr<bool>> done) {
  if (absl::Status st = CheckPath(path); !st.ok()) return done(st);
  absl::StatusOr<bool> result;
  {
    absl::MutexLock lock(&mu_);
    ExpireLocked();
    auto it = files_.find(path);
    if (it == files_.end() || (if_version != 0 && it->second.version != if_version)) {
      result = false;
    } else {
      const bool permanent = it->second.session == 0;
      DeleteLocked(path);
      result = true;
      if (permanent) {
        if (absl::Status st = SaveLocked(); !st.ok()) result = st;
      }
    }
  }
  Deliver();
  done(std::move(result));
}

std::unique_ptr<LockService::Watch> EmbeddedLockService::WatchPrefix(
    std::string prefix, int64_t after, std::function<void(const WatchEvent&)> on_event,
    std::function<void(const absl::Status&)> on_error) {
  uint64_t id = 0;
  int64_t oldest = 0;
  {
    absl::MutexLock lock(&mu_);
    oldest = history_.empty() ? revision_ + 1 : history_.front().revision;
    if (after + 1 >= oldest || after >= revision_) {
      id = next_watch_++;
      watchers_[id] = Watcher{prefix, std::move(on_event), revision_, false};
      // The changes since `after` it has not seen: to it alone, first.
      for (const WatchEvent& e : history_)
        if (e.revision > after && e.path.compare(0, prefix.size(), prefix) == 0)
          pending_.push_back(Queued{e, id});
    }
  }
  if (id == 0) {
    on_error(absl::OutOfRangeError(
        StrCat("revision ", after, " is older than the lock service's history (from ", oldest,
               "): list again and watch from the listing's revision")));
    return std::make_unique<EmbeddedWatch>(nullptr, 0);
  }
  Deliver();
  return std::make_unique<EmbeddedWatch>(this, id);
}

void EmbeddedLockService::CancelWatch(uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = watchers_.find(id);
  if (it == watchers_.end()) return;
  it->second.cancelled = true;
  // Wait out a delivery to it in progress, unless this is that delivery.
  mu_.Await(absl::Condition(
      +[](EmbeddedLockService* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
        return s->delivering_watch_ == 0 || s->delivering_thread_ == std::this_thread::get_id();
      },
      this));
  watchers_.erase(id);
}

void EmbeddedLockService::Deliver() {
  absl::MutexLock lock(&mu_);
  if (delivering_) return;  // the thread delivering will get to them
  delivering_ = true;
  delivering_thread_ = std::this_thread::get_id();
  while (!pending_.empty()) {
    const Queued q = std::move(pending_.front());
    pending_.pop_front();
    std::vector<uint64_t> ids;
    if (q.only_watch != 0) {
      ids.push_back(q.only_watch);
    } else {
      for (const auto& [id, w] : watchers_)
        if (q.event.revision > w.from && q.event.path.compare(0, w.prefix.size(), w.prefix) == 0)
          ids.push_back(id);
    }
    for (uint64_t id : ids) {
      auto it = watchers_.find(id);
      if (it == watchers_.end() || it->second.cancelled) continue;
      std::function<void(const WatchEvent&)> fn = it->second.on_event;
      delivering_watch_ = id;
      mu_.Unlock();
      fn(q.event);
      mu_.Lock();
      delivering_watch_ = 0;
    }
  }
  delivering_ = false;
}

}  // namespace megastore::storage::lock
