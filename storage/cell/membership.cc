#include "storage/cell/membership.h"

#include <atomic>
#include <vector>

#include "base/strings.h"

namespace megastore::storage::cell {

std::string ServersDir(const std::string& cell) { return StrCat("/", cell, "/servers/"); }
std::string MasterLock(const std::string& cell) { return StrCat("/", cell, "/master"); }

// ---- ServerRegistration ----------------------------------------------------------------------

struct ServerRegistration::Lost {
  absl::Mutex mu;
  bool fired ABSL_GUARDED_BY(mu) = false;
  bool closed ABSL_GUARDED_BY(mu) = false;
  std::function<void(const absl::Status&)> on_lost;
  void Fire(const absl::Status& why) {
    {
      absl::MutexLock lock(&mu);
      if (fired || closed) return;
      fired = true;
    }
    on_lost(why);
  }
};

ServerRegistration::ServerRegistration(lock::LockService* service, Env* env, std::string cell,
                                       std::string address, absl::Duration ttl,
                                       std::function<void(const absl::Status&)> on_lost)
    : service_(service),
      path_(ServersDir(cell) + address),
      address_(std::move(address)),
      lost_(std::make_shared<Lost>()) {
  lost_->on_lost = std::move(on_lost);
  session_ = std::make_unique<lock::LockSession>(
      service, env, ttl, [lost = lost_](const absl::Status& why) { lost->Fire(why); });
}

ServerRegistration::~ServerRegistration() {
  {
    absl::MutexLock lock(&lost_->mu);
    lost_->closed = true;  // leaving deletes the file: that is not a loss
  }
  std::unique_ptr<lock::LockService::Watch> watch;
  {
    absl::MutexLock lock(&mu_);
    watch = std::move(watch_);
  }
  if (watch) watch->Cancel();
  session_->Close();
}

void ServerRegistration::Start(lock::LockService::Callback<absl::Status> done) {
  auto parked = std::make_shared<lock::LockService::Callback<absl::Status>>(std::move(done));
  session_->Start([this, parked](absl::StatusOr<lock::SessionId> id) {
    if (!id.ok()) return (*parked)(id.status());
    service_->Create(path_, address_, *id, [this, parked](absl::StatusOr<bool> created) {
      if (!created.ok()) return (*parked)(created.status());
      if (!*created)
        return (*parked)(absl::AlreadyExistsError(StrCat(
            path_,
            " exists: an earlier incarnation of this server still holds it; it goes when that "
            "session expires")));
      // Watch the file from the version just written: if anyone deletes
      // it, this server is out of the cell.
      service_->Get(path_, [this, parked](absl::StatusOr<std::optional<lock::FileInfo>> f) {
        if (!f.ok()) return (*parked)(f.status());
        if (!f->has_value())
          return (*parked)(
              absl::UnavailableError(StrCat(path_, " vanished right after it was created")));
        WatchFile((*f)->version);
        (*parked)(absl::OkStatus());
      });
    });
  });
}

void ServerRegistration::WatchFile(int64_t after) {
  std::weak_ptr<Lost> weak = lost_;
  auto watch = service_->WatchPrefix(
      path_, after,
      [weak, path = path_](const lock::WatchEvent& e) {
        if (e.path != path || e.type != lock::WatchEvent::Type::kDelete) return;
        if (auto lost = weak.lock())
          lost->Fire(absl::AbortedError(StrCat(path, " was deleted (by the master?)")));
      },
      [this, weak](const absl::Status& why) {
        // The watch broke: look at the file itself, and watch again.
        auto lost = weak.lock();
        if (lost == nullptr) return;
        {
          absl::MutexLock lock(&lost->mu);
          if (lost->closed) return;
        }
        service_->Get(path_, [this, weak, why](absl::StatusOr<std::optional<lock::FileInfo>> f) {
          auto lost = weak.lock();
          if (lost == nullptr) return;
          if (f.ok() && !f->has_value())
            return lost->Fire(absl::AbortedError(StrCat(path_, " was deleted")));
          if (!f.ok()) return;  // the session's own renewals decide now
          {
            absl::MutexLock lock(&lost->mu);
            if (lost->closed) return;
          }
          WatchFile((*f)->version);
        });
      });
  absl::MutexLock lock(&mu_);
  if (watch_) retired_.push_back(std::move(watch_));  // may be running this very callback
  watch_ = std::move(watch);
}

bool ServerRegistration::registered() const { return session_->alive(); }

// ---- MasterElection ------------------------------------------------------------------------

struct MasterElection::State : std::enable_shared_from_this<State> {
  lock::LockService* service;
  Env* env;
  std::string lock_path;
  std::string address;
  absl::Duration ttl;
  std::function<void()> on_elected;
  std::function<void(const absl::Status&)> on_lost;

  mutable absl::Mutex mu;
  std::unique_ptr<lock::LockSession> session ABSL_GUARDED_BY(mu);
  lock::SessionId id ABSL_GUARDED_BY(mu) = 0;
  bool master ABSL_GUARDED_BY(mu) = false;
  bool stopped ABSL_GUARDED_BY(mu) = false;
  std::string current ABSL_GUARDED_BY(mu);
  // Watches are retired, not destroyed, from their own callbacks.
  std::vector<std::unique_ptr<lock::LockService::Watch>> watches ABSL_GUARDED_BY(mu);

  // A new session, then a try for the lock.
  void Campaign() {
    std::weak_ptr<State> weak = shared_from_this();
    auto session =
        std::make_unique<lock::LockSession>(service, env, ttl, [weak](const absl::Status& why) {
          if (auto self = weak.lock()) self->SessionLost(why);
        });
    lock::LockSession* s = session.get();
    {
      absl::MutexLock lock(&mu);
      if (stopped) return;
      this->session = std::move(session);
      id = 0;
    }
    s->Start([weak](absl::StatusOr<lock::SessionId> id) {
      auto self = weak.lock();
      if (self == nullptr) return;
      if (!id.ok()) {
        // The lock service is unreachable: try again in a while.
        self->env->Schedule(self->ttl / 3, [weak] {
          if (auto s = weak.lock()) s->Campaign();
        });
        return;
      }
      {
        absl::MutexLock lock(&self->mu);
        self->id = *id;
      }
      self->Try();
    });
  }

  void SessionLost(const absl::Status& why) {
    bool was_master;
    {
      absl::MutexLock lock(&mu);
      if (stopped) return;
      was_master = master;
      master = false;
    }
    if (was_master) return on_lost(why);
    Campaign();  // a standby just starts over
  }

  // Creates the lock, or finds who holds it and watches for it to go.
  void Try() {
    lock::SessionId session_id;
    {
      absl::MutexLock lock(&mu);
      if (stopped || master) return;
      session_id = id;
    }
    std::weak_ptr<State> weak = shared_from_this();
    service->Create(lock_path, address, session_id, [weak](absl::StatusOr<bool> created) {
      auto self = weak.lock();
      if (self == nullptr) return;
      if (!created.ok()) {
        self->env->Schedule(self->ttl / 3, [weak] {
          if (auto s = weak.lock()) s->Try();
        });
        return;
      }
      if (*created) {
        {
          absl::MutexLock lock(&self->mu);
          if (self->stopped) return;
          self->master = true;
          self->current = self->address;
        }
        return self->on_elected();
      }
      self->StandBy();
    });
  }

  void StandBy() {
    std::weak_ptr<State> weak = shared_from_this();
    service->List(lock_path, [weak](absl::StatusOr<lock::Listing> listing) {
      auto self = weak.lock();
      if (self == nullptr) return;
      if (!listing.ok() || listing->files.empty())
        return self->Try();  // gone already, or ask again
      {
        absl::MutexLock lock(&self->mu);
        self->current = listing->files.front().contents;
      }
      auto fired = std::make_shared<std::atomic<bool>>(false);
      auto again = [weak, fired] {
        if (fired->exchange(true)) return;
        if (auto s = weak.lock()) s->Try();
      };
      auto watch = self->service->WatchPrefix(
          self->lock_path, listing->revision,
          [again](const lock::WatchEvent& e) {
            if (e.type == lock::WatchEvent::Type::kDelete) again();
          },
          [again](const absl::Status&) { again(); });
      absl::MutexLock lock(&self->mu);
      self->watches.push_back(std::move(watch));
    });
  }
};

MasterElection::MasterElection(lock::LockService* service, Env* env, std::string cell,
                               std::string address, absl::Duration ttl,
                               std::function<void()> on_elected,
                               std::function<void(const absl::Status&)> on_lost)
    : state_(std::make_shared<State>()) {
  state_->service = service;
  state_->env = env;
  state_->lock_path = MasterLock(cell);
  state_->address = std::move(address);
  state_->ttl = ttl;
  state_->on_elected = std::move(on_elected);
  state_->on_lost = std::move(on_lost);
}

MasterElection::~MasterElection() {
  std::unique_ptr<lock::LockSession> session;
  std::vector<std::unique_ptr<lock::LockService::Watch>> watches;
  {
    absl::MutexLock lock(&state_->mu);
    state_->stopped = true;
    session = std::move(state_->session);
    watches = std::move(state_->watches);
  }
  watches.clear();
  if (session) session->Close();  // the lock goes with it
}

void MasterElection::Start() { state_->Campaign(); }

bool MasterElection::is_master() const {
  absl::MutexLock lock(&state_->mu);
  return state_->master && state_->session != nullptr && state_->session->alive();
}

std::string MasterElection::master() const {
  absl::MutexLock lock(&state_->mu);
  return state_->current;
}

// ---- LiveServers ----------------------------------------------------------------------------

struct LiveServers::State : std::enable_shared_from_this<State> {
  lock::LockService* service;
  Env* env;
  std::string dir;
  std::function<void(const std::string&)> on_join, on_leave;

  mutable absl::Mutex mu;
  std::set<std::string> servers ABSL_GUARDED_BY(mu);
  bool stopped ABSL_GUARDED_BY(mu) = false;
  uint64_t generation ABSL_GUARDED_BY(mu) = 0;  // events of older watches are ignored
  std::vector<std::unique_ptr<lock::LockService::Watch>> watches ABSL_GUARDED_BY(mu);

  // Lists the directory, reports the difference from what was known, and
  // watches from the listing's revision.
  void Relist() {
    std::weak_ptr<State> weak = shared_from_this();
    service->List(dir, [weak](absl::StatusOr<lock::Listing> listing) {
      auto self = weak.lock();
      if (self == nullptr) return;
      if (!listing.ok()) {
        self->env->Schedule(absl::Seconds(1), [weak] {
          if (auto s = weak.lock()) s->Relist();
        });
        return;
      }
      std::set<std::string> now;
      for (const lock::FileInfo& f : listing->files) now.insert(f.path.substr(self->dir.size()));
      std::vector<std::string> joined, left;
      uint64_t generation;
      {
        absl::MutexLock lock(&self->mu);
        if (self->stopped) return;
        for (const std::string& s : now)
          if (!self->servers.count(s)) joined.push_back(s);
        for (const std::string& s : self->servers)
          if (!now.count(s)) left.push_back(s);
        self->servers = now;
        generation = ++self->generation;
      }
      for (const std::string& s : left) self->on_leave(s);
      for (const std::string& s : joined) self->on_join(s);
      auto watch = self->service->WatchPrefix(
          self->dir, listing->revision,
          [weak, generation](const lock::WatchEvent& e) {
            if (auto s = weak.lock()) s->Event(e, generation);
          },
          [weak, generation](const absl::Status&) {
            auto s = weak.lock();
            if (s == nullptr) return;
            {
              absl::MutexLock lock(&s->mu);
              if (s->stopped || s->generation != generation) return;
            }
            s->Relist();
          });
      absl::MutexLock lock(&self->mu);
      self->watches.push_back(std::move(watch));
    });
  }

  void Event(const lock::WatchEvent& e, uint64_t from_generation) {
    const std::string server = e.path.substr(dir.size());
    bool changed;
    {
      absl::MutexLock lock(&mu);
      if (stopped || generation != from_generation) return;
      changed = e.type == lock::WatchEvent::Type::kPut ? servers.insert(server).second
                                                       : servers.erase(server) > 0;
    }
    if (!changed) return;
    if (e.type == lock::WatchEvent::Type::kPut) {
      on_join(server);
    } else {
      on_leave(server);
    }
  }
};

LiveServers::LiveServers(lock::LockService* service, Env* env, std::string cell,
                         std::function<void(const std::string&)> on_join,
                         std::function<void(const std::string&)> on_leave)
    : state_(std::make_shared<State>()) {
  state_->service = service;
  state_->env = env;
  state_->dir = ServersDir(cell);
  state_->on_join = std::move(on_join);
  state_->on_leave = std::move(on_leave);
}

LiveServers::~LiveServers() {
  std::vector<std::unique_ptr<lock::LockService::Watch>> watches;
  {
    absl::MutexLock lock(&state_->mu);
    state_->stopped = true;
    watches = std::move(state_->watches);
  }
}

void LiveServers::Start() { state_->Relist(); }

std::set<std::string> LiveServers::servers() const {
  absl::MutexLock lock(&state_->mu);
  return state_->servers;
}

}  // namespace megastore::storage::cell
