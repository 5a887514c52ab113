#include "storage/lock/lock_service_rpc.h"

#include <atomic>
#include <map>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "base/strings.h"
#include "storage/lock/lock.pb.h"

namespace megastore::storage::lock {

namespace {

void ToProto(const FileInfo& f, LsFile* p) {
  p->set_path(f.path);
  p->set_contents(f.contents);
  p->set_version(f.version);
  p->set_session(f.session);
}

FileInfo FromProto(const LsFile& p) {
  return FileInfo{p.path(), p.contents(), p.version(), p.session()};
}

// Answers a unary call with `reply` built by `fill` from a result.
template <typename T>
LockService::Callback<absl::StatusOr<T>> Reply(std::shared_ptr<rpc::Responder> responder,
                                               std::function<void(T&, LsReply&)> fill) {
  return [responder, fill](absl::StatusOr<T> r) mutable {
    if (!r.ok()) return responder->Finish(r.status());
    LsReply reply;
    fill(*r, reply);
    responder->Finish(absl::OkStatus(), reply.SerializeAsString());
  };
}

LockService::Callback<absl::Status> ReplyStatus(std::shared_ptr<rpc::Responder> responder) {
  return [responder](absl::Status s) {
    responder->Finish(s, s.ok() ? LsReply().SerializeAsString() : "");
  };
}

// One ls.Watch stream: its watch, until it finishes (its time is up, the
// watch failed, or the server shuts down).
struct Stream {
  std::shared_ptr<rpc::Responder> responder;
  absl::Mutex mu;
  std::unique_ptr<LockService::Watch> watch ABSL_GUARDED_BY(mu);
  bool finished ABSL_GUARDED_BY(mu) = false;

  // Ends the stream once. The watch is cancelled off this thread when this
  // may be the watch's own callback (`inline_cancel` false).
  void Finish(const absl::Status& s, bool inline_cancel) {
    std::unique_ptr<LockService::Watch> w;
    {
      absl::MutexLock lock(&mu);
      if (finished) return;
      finished = true;
      w = std::move(watch);
    }
    responder->Finish(s);
    if (w == nullptr) return;
    if (inline_cancel) {
      w.reset();
    } else {
      std::thread([w = std::move(w)]() mutable { w.reset(); }).detach();
    }
  }
};

}  // namespace

// The streams open now: they own them (the watch's callbacks and the timer
// that ends a stream hold them weakly), so the destructor can end them.
struct LockServiceRpc::Streams {
  absl::Mutex mu;
  std::map<Stream*, std::shared_ptr<Stream>> open ABSL_GUARDED_BY(mu);
  bool closed ABSL_GUARDED_BY(mu) = false;
};

LockServiceRpc::LockServiceRpc(LockService* service, Env* env)
    : service_(service), env_(env), streams_(std::make_shared<Streams>()) {}

LockServiceRpc::~LockServiceRpc() {
  std::vector<std::shared_ptr<Stream>> open;
  {
    absl::MutexLock lock(&streams_->mu);
    streams_->closed = true;
    for (auto& [raw, stream] : streams_->open) open.push_back(std::move(stream));
    streams_->open.clear();
  }
  for (auto& s : open)
    s->Finish(absl::UnavailableError("the lock service is shutting down"), /*inline_cancel=*/true);
}

void LockServiceRpc::Register(rpc::RpcServer* rpc) {
  LockService* service = service_;
  Env* env = env_;
  std::shared_ptr<Streams> streams = streams_;
  auto unary = [rpc](const std::string& method,
                     std::function<void(LsRequest&, std::shared_ptr<rpc::Responder>)> serve) {
    rpc->Register(method, [method, serve](const rpc::CallContext&, std::string_view body,
                                          std::shared_ptr<rpc::Responder> responder) {
      LsRequest r;
      if (!r.ParseFromArray(body.data(), static_cast<int>(body.size())))
        return responder->Finish(
            absl::InvalidArgumentError(StrCat("malformed ", method, " request")));
      serve(r, std::move(responder));
    });
  };
  unary("ls.OpenSession", [service](LsRequest& r, std::shared_ptr<rpc::Responder> out) {
    service->OpenSession(
        absl::Microseconds(r.ttl_micros()),
        Reply<SessionId>(out, [](SessionId& s, LsReply& reply) { reply.set_session(s); }));
  });
  unary("ls.KeepAlive", [service](LsRequest& r, std::shared_ptr<rpc::Responder> out) {
    service->KeepAlive(r.session(), ReplyStatus(out));
  });
  unary("ls.CloseSession", [service](LsRequest& r, std::shared_ptr<rpc::Responder> out) {
    service->CloseSession(r.session(), ReplyStatus(out));
  });
  unary("ls.Put", [service](LsRequest& r, std::shared_ptr<rpc::Responder> out) {
    service->Put(r.path(), r.contents(), r.session(),
                 Reply<int64_t>(out, [](int64_t& v, LsReply& reply) { reply.set_version(v); }));
  });
  unary("ls.Create", [service](LsRequest& r, std::shared_ptr<rpc::Responder> out) {
    service->Create(
        r.path(), r.contents(), r.session(),
        Reply<bool>(out, [](bool& created, LsReply& reply) { reply.set_done(created); }));
  });
  unary("ls.Get", [service](LsRequest& r, std::shared_ptr<rpc::Responder> out) {
    service->Get(r.path(), Reply<std::optional<FileInfo>>(
                               out, [](std::optional<FileInfo>& f, LsReply& reply) {
                                 if (f.has_value()) ToProto(*f, reply.mutable_file());
                               }));
  });
  unary("ls.List", [service](LsRequest& r, std::shared_ptr<rpc::Responder> out) {
    service->List(r.path(), Reply<Listing>(out, [](Listing& l, LsReply& reply) {
                    for (const FileInfo& f : l.files) ToProto(f, reply.add_files());
                    reply.set_revision(l.revision);
                  }));
  });
  unary("ls.Delete", [service](LsRequest& r, std::shared_ptr<rpc::Responder> out) {
    service->Delete(r.path(), r.if_version(), Reply<bool>(out, [](bool& deleted, LsReply& reply) {
                      reply.set_done(deleted);
                    }));
  });
  rpc->Register(
      "ls.Watch", [service, env, streams](const rpc::CallContext& ctx, std::string_view body,
                                          std::shared_ptr<rpc::Responder> responder) {
        LsWatchRequest r;
        if (!r.ParseFromArray(body.data(), static_cast<int>(body.size())))
          return responder->Finish(absl::InvalidArgumentError("malformed ls.Watch request"));
        auto stream = std::make_shared<Stream>();
        stream->responder = responder;
        {
          absl::MutexLock lock(&streams->mu);
          if (streams->closed)
            return responder->Finish(absl::UnavailableError("the lock service is shutting down"));
          streams->open[stream.get()] = stream;
        }
        std::weak_ptr<Stream> weak = stream;
        auto forget = [streams, raw = stream.get()] {
          absl::MutexLock lock(&streams->mu);
          streams->open.erase(raw);
        };
        auto watch = service->WatchPrefix(
            r.prefix(), r.after(),
            [responder](const WatchEvent& e) {
              LsEvents events;
              LsEvent* out = events.add_events();
              out->set_deleted(e.type == WatchEvent::Type::kDelete);
              out->set_path(e.path);
              out->set_contents(e.contents);
              out->set_revision(e.revision);
              responder->Send(events.SerializeAsString());
            },
            [weak, forget](const absl::Status& s) {
              if (auto st = weak.lock()) st->Finish(s, /*inline_cancel=*/false);
              forget();
            });
        {
          absl::MutexLock lock(&stream->mu);
          if (!stream->finished) stream->watch = std::move(watch);
        }
        // The stream ends a little before the caller's deadline, so its OK
        // arrives in time. The timer holds it weakly: a stream the server
        // ended is gone.
        const absl::Duration length =
            std::min(RemoteLockService::kWatchStream, ctx.timeout - absl::Seconds(1));
        env->Schedule(std::max(length, absl::Milliseconds(100)), [weak, forget] {
          if (auto st = weak.lock()) st->Finish(absl::OkStatus(), /*inline_cancel=*/true);
          forget();
        });
      });
}

// ---- client ---------------------------------------------------------------------------------

namespace {

rpc::ClientOptions ClientFor(std::string address) {
  rpc::ClientOptions o;
  o.server = std::move(address);
  return o;
}

// A RemoteLockService watch: a chain of ls.Watch streams, each resumed from
// the last revision delivered.
struct RemoteWatchState : std::enable_shared_from_this<RemoteWatchState> {
  std::shared_ptr<rpc::RpcClient> rpc;
  std::string prefix;
  std::function<void(const WatchEvent&)> on_event;
  std::function<void(const absl::Status&)> on_error;

  absl::Mutex mu;
  bool cancelled ABSL_GUARDED_BY(mu) = false;
  int64_t last ABSL_GUARDED_BY(mu) = 0;
  // Callbacks run under this lock (so Cancel can wait them out) unless
  // Cancel is called from one.
  absl::Mutex delivery;
  std::atomic<std::thread::id> delivering{};

  void Stream() {
    LsWatchRequest req;
    req.set_prefix(prefix);
    {
      absl::MutexLock lock(&mu);
      if (cancelled) return;
      req.set_after(last);
    }
    auto self = shared_from_this();
    rpc->CallAsync(
        "ls.Watch", req.SerializeAsString(), RemoteLockService::kWatchStream + absl::Seconds(5),
        [self](absl::StatusOr<std::string> final) {
          {
            absl::MutexLock lock(&self->mu);
            if (self->cancelled) return;
          }
          if (final.ok() || absl::IsDeadlineExceeded(final.status()) ||
              absl::IsUnavailable(final.status())) {
            // The stream's time was up (resume now), or the connection
            // broke (resume after a pause, off the client's thread).
            if (final.ok()) return self->Stream();
            std::thread([self] {
              absl::SleepFor(absl::Milliseconds(100));
              self->Stream();
            }).detach();
            return;
          }
          self->Deliver([&] { self->on_error(final.status()); });
        },
        [self](std::string_view message) {
          LsEvents events;
          if (!events.ParseFromArray(message.data(), static_cast<int>(message.size())))
            return false;
          for (const LsEvent& e : events.events()) {
            WatchEvent ev{e.deleted() ? WatchEvent::Type::kDelete : WatchEvent::Type::kPut,
                          e.path(), e.contents(), e.revision()};
            {
              absl::MutexLock lock(&self->mu);
              if (self->cancelled) return false;
              if (ev.revision <= self->last) continue;  // seen before a resume
              self->last = ev.revision;
            }
            self->Deliver([&] { self->on_event(ev); });
          }
          return true;
        });
  }

  template <typename Fn>
  void Deliver(Fn fn) {
    absl::MutexLock lock(&delivery);
    {
      absl::MutexLock state(&mu);
      if (cancelled) return;
    }
    delivering = std::this_thread::get_id();
    fn();
    delivering = std::thread::id();
  }

  void Cancel() {
    {
      absl::MutexLock lock(&mu);
      if (cancelled) return;
      cancelled = true;
    }
    if (delivering == std::this_thread::get_id()) return;  // from its own callback
    absl::MutexLock wait(&delivery);                       // a callback in progress finishes first
  }
};

class RemoteWatch : public LockService::Watch {
 public:
  explicit RemoteWatch(std::shared_ptr<RemoteWatchState> state) : state_(std::move(state)) {}
  ~RemoteWatch() override { Cancel(); }
  void Cancel() override { state_->Cancel(); }

 private:
  std::shared_ptr<RemoteWatchState> state_;
};

}  // namespace

RemoteLockService::RemoteLockService(std::string address, absl::Duration timeout)
    : timeout_(timeout), rpc_(std::make_shared<rpc::RpcClient>(ClientFor(std::move(address)))) {}

RemoteLockService::~RemoteLockService() = default;

void RemoteLockService::Unary(const std::string& method, const LsRequest& request,
                              absl::AnyInvocable<void(absl::StatusOr<LsReply>)> done) {
  auto parked =
      std::make_shared<absl::AnyInvocable<void(absl::StatusOr<LsReply>)>>(std::move(done));
  rpc_->CallAsync(method, request.SerializeAsString(), timeout_,
                  [parked, method](absl::StatusOr<std::string> r) {
                    if (!r.ok()) return (*parked)(r.status());
                    LsReply reply;
                    if (!reply.ParseFromString(*r))
                      return (*parked)(absl::InternalError(StrCat("malformed ", method, " reply")));
                    (*parked)(std::move(reply));
                  });
}

void RemoteLockService::OpenSession(absl::Duration ttl, Callback<absl::StatusOr<SessionId>> done) {
  LsRequest r;
  r.set_ttl_micros(absl::ToInt64Microseconds(ttl));
  Unary("ls.OpenSession", r, [done = std::move(done)](absl::StatusOr<LsReply> reply) mutable {
    if (!reply.ok()) return done(reply.status());
    done(SessionId{reply->session()});
  });
}

void RemoteLockService::KeepAlive(SessionId session, Callback<absl::Status> done) {
  LsRequest r;
  r.set_session(session);
  Unary("ls.KeepAlive", r,
        [done = std::move(done)](absl::StatusOr<LsReply> reply) mutable { done(reply.status()); });
}

void RemoteLockService::CloseSession(SessionId session, Callback<absl::Status> done) {
  LsRequest r;
  r.set_session(session);
  Unary("ls.CloseSession", r,
        [done = std::move(done)](absl::StatusOr<LsReply> reply) mutable { done(reply.status()); });
}

void RemoteLockService::Put(std::string path, std::string contents, SessionId session,
                            Callback<absl::StatusOr<int64_t>> done) {
  LsRequest r;
  r.set_path(std::move(path));
  r.set_contents(std::move(contents));
  r.set_session(session);
  Unary("ls.Put", r, [done = std::move(done)](absl::StatusOr<LsReply> reply) mutable {
    if (!reply.ok()) return done(reply.status());
    done(reply->version());
  });
}

void RemoteLockService::Create(std::string path, std::string contents, SessionId session,
                               Callback<absl::StatusOr<bool>> done) {
  LsRequest r;
  r.set_path(std::move(path));
  r.set_contents(std::move(contents));
  r.set_session(session);
  Unary("ls.Create", r, [done = std::move(done)](absl::StatusOr<LsReply> reply) mutable {
    if (!reply.ok()) return done(reply.status());
    done(reply->done());
  });
}

void RemoteLockService::Get(std::string path,
                            Callback<absl::StatusOr<std::optional<FileInfo>>> done) {
  LsRequest r;
  r.set_path(std::move(path));
  Unary("ls.Get", r, [done = std::move(done)](absl::StatusOr<LsReply> reply) mutable {
    if (!reply.ok()) return done(reply.status());
    if (!reply->has_file()) return done(std::optional<FileInfo>());
    done(std::optional<FileInfo>(FromProto(reply->file())));
  });
}

void RemoteLockService::List(std::string prefix, Callback<absl::StatusOr<Listing>> done) {
  LsRequest r;
  r.set_path(std::move(prefix));
  Unary("ls.List", r, [done = std::move(done)](absl::StatusOr<LsReply> reply) mutable {
    if (!reply.ok()) return done(reply.status());
    Listing out;
    for (const LsFile& f : reply->files()) out.files.push_back(FromProto(f));
    out.revision = reply->revision();
    done(std::move(out));
  });
}

void RemoteLockService::Delete(std::string path, int64_t if_version,
                               Callback<absl::StatusOr<bool>> done) {
  LsRequest r;
  r.set_path(std::move(path));
  r.set_if_version(if_version);
  Unary("ls.Delete", r, [done = std::move(done)](absl::StatusOr<LsReply> reply) mutable {
    if (!reply.ok()) return done(reply.status());
    done(reply->done());
  });
}

std::unique_ptr<LockService::Watch> RemoteLockService::WatchPrefix(
    std::string prefix, int64_t after, std::function<void(const WatchEvent&)> on_event,
    std::function<void(const absl::Status&)> on_error) {
  auto state = std::make_shared<RemoteWatchState>();
  state->rpc = rpc_;
  state->prefix = std::move(prefix);
  state->on_event = std::move(on_event);
  state->on_error = std::move(on_error);
  {
    absl::MutexLock lock(&state->mu);
    state->last = after;
  }
  state->Stream();
  return std::make_unique<RemoteWatch>(state);
}

}  // namespace megastore::storage::lock
