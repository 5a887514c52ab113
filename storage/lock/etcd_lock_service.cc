#include "storage/lock/etcd_lock_service.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/strings/escaping.h"
#include "base/logging.h"
#include "base/strings.h"
#include "base/thread_name.h"

namespace megastore::storage::lock {

namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using asio::ip::tcp;
using google::protobuf::Struct;
using google::protobuf::Value;

std::string B64(const std::string& s) { return absl::Base64Escape(s); }

std::string UnB64(const std::string& s) {
  std::string out;
  absl::Base64Unescape(s, &out);
  return out;
}

// The key just after every key that starts with `prefix` (etcd's range_end).
std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    if (static_cast<unsigned char>(prefix.back()) != 0xff) {
      prefix.back() = static_cast<char>(static_cast<unsigned char>(prefix.back()) + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // every key
}

std::string Quote(const std::string& s) { return StrCat("\"", JsonEscape(s), "\""); }

const Value* Field(const Struct& s, const std::string& name) {
  auto it = s.fields().find(name);
  return it == s.fields().end() ? nullptr : &it->second;
}

// etcd's JSON gives int64s as strings.
int64_t Int(const Struct& s, const std::string& name) {
  const Value* v = Field(s, name);
  if (v == nullptr) return 0;
  if (v->has_string_value()) return std::strtoll(v->string_value().c_str(), nullptr, 10);
  return static_cast<int64_t>(v->number_value());
}

const Struct* Object(const Struct& s, const std::string& name) {
  const Value* v = Field(s, name);
  return v != nullptr && v->has_struct_value() ? &v->struct_value() : nullptr;
}

std::vector<const Struct*> Objects(const Struct& s, const std::string& name) {
  std::vector<const Struct*> out;
  const Value* v = Field(s, name);
  if (v == nullptr || !v->has_list_value()) return out;
  for (const Value& e : v->list_value().values())
    if (e.has_struct_value()) out.push_back(&e.struct_value());
  return out;
}

absl::StatusOr<Struct> ParseJson(const std::string& text, const std::string& what) {
  Struct s;
  google::protobuf::util::JsonParseOptions o;
  o.ignore_unknown_fields = true;
  if (!google::protobuf::util::JsonStringToMessage(text, &s, o).ok())
    return absl::InternalError(
        StrCat("etcd: unparsable reply to ", what, ": ", text.substr(0, 200)));
  return s;
}

void SetTimeouts(tcp::socket& socket, absl::Duration timeout) {
  timeval tv{};
  tv.tv_sec = absl::ToInt64Seconds(timeout);
  tv.tv_usec = absl::ToInt64Microseconds(timeout) % 1'000'000;
  ::setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(socket.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

absl::Status Connect(asio::io_context& io, tcp::socket& socket, const std::string& endpoint) {
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos)
    return absl::InvalidArgumentError(StrCat("etcd endpoint \"", endpoint, "\" is not HOST:PORT"));
  boost::system::error_code ec;
  tcp::resolver resolver(io);
  auto results = resolver.resolve(endpoint.substr(0, colon), endpoint.substr(colon + 1), ec);
  if (ec) return absl::UnavailableError(StrCat("etcd ", endpoint, ": ", ec.message()));
  asio::connect(socket, results, ec);
  if (ec)
    return absl::UnavailableError(StrCat("etcd ", endpoint, ": cannot connect: ", ec.message()));
  return absl::OkStatus();
}

bhttp::request<bhttp::string_body> Request(const std::string& endpoint, const std::string& path,
                                           std::string body) {
  bhttp::request<bhttp::string_body> req{bhttp::verb::post, path, 11};
  req.set(bhttp::field::host, endpoint);
  req.set(bhttp::field::content_type, "application/json");
  req.body() = std::move(body);
  req.prepare_payload();
  return req;
}

// etcd's error replies ({"error": ..., "code": N, "message": ...}) as statuses.
absl::Status EtcdError(int http_status, const std::string& body, const std::string& what) {
  std::string message = body;
  if (absl::StatusOr<Struct> s = ParseJson(body, what); s.ok()) {
    if (const Value* m = Field(*s, "message"); m != nullptr && m->has_string_value())
      message = m->string_value();
  }
  if (message.find("lease not found") != std::string::npos)
    return absl::NotFoundError(StrCat("lock service session has ended (etcd: ", message, ")"));
  if (http_status >= 500) return absl::UnavailableError(StrCat("etcd ", what, ": ", message));
  return absl::InternalError(StrCat("etcd ", what, " refused (HTTP ", http_status, "): ", message));
}

}  // namespace

struct EtcdLockService::Impl : std::enable_shared_from_this<Impl> {
  EtcdOptions options;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  bool stopping = false;
  std::vector<std::thread> threads;

  void Run(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu);
      queue.push_back(std::move(fn));
    }
    cv.notify_one();
  }

  void Work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stopping || !queue.empty(); });
        if (queue.empty()) return;
        fn = std::move(queue.front());
        queue.pop_front();
      }
      fn();
    }
  }

  // One request, to the first endpoint that answers.
  absl::StatusOr<Struct> Call(const std::string& path, const std::string& body) {
    absl::Status last = absl::UnavailableError("no etcd endpoint configured");
    for (const std::string& endpoint : options.endpoints) {
      asio::io_context io;
      tcp::socket socket(io);
      if (absl::Status s = Connect(io, socket, endpoint); !s.ok()) {
        last = s;
        continue;
      }
      SetTimeouts(socket, options.timeout);
      boost::system::error_code ec;
      auto req = Request(endpoint, path, body);
      bhttp::write(socket, req, ec);
      boost::beast::flat_buffer buffer;
      bhttp::response<bhttp::string_body> resp;
      if (!ec) bhttp::read(socket, buffer, resp, ec);
      if (ec) {
        last = absl::UnavailableError(StrCat("etcd ", endpoint, path, ": ", ec.message()));
        continue;
      }
      if (resp.result_int() != 200) return EtcdError(resp.result_int(), resp.body(), path);
      return ParseJson(resp.body(), path);
    }
    return last;
  }

  std::string Key(const std::string& path) const { return options.key_prefix + path; }
  std::string PathOf(const std::string& key) const { return key.substr(options.key_prefix.size()); }

  FileInfo File(const Struct& kv) const {
    FileInfo f;
    const Value* k = Field(kv, "key");
    const Value* v = Field(kv, "value");
    f.path = PathOf(UnB64(k != nullptr ? k->string_value() : ""));
    f.contents = UnB64(v != nullptr ? v->string_value() : "");
    f.version = Int(kv, "mod_revision");
    f.session = Int(kv, "lease");
    return f;
  }
};

// A watch's stream runs on its own thread, reading until cancelled (the
// socket is shut down under it). The state is shared with that thread, so
// a watch may be cancelled or destroyed from its own callback.
struct WatchState {
  std::mutex mu;
  bool cancelled = false;
  int fd = -1;
  std::thread thread;
};

class EtcdWatch : public LockService::Watch {
 public:
  explicit EtcdWatch(std::shared_ptr<WatchState> state) : state_(std::move(state)) {}
  ~EtcdWatch() override { Cancel(); }
  void Cancel() override {
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (!state_->cancelled) {
        state_->cancelled = true;
        if (state_->fd >= 0) ::shutdown(state_->fd, SHUT_RDWR);
      }
    }
    if (!state_->thread.joinable()) return;
    if (state_->thread.get_id() == std::this_thread::get_id()) {
      state_->thread.detach();  // from its own callback: it stops after the callback
    } else {
      state_->thread.join();
    }
  }

 private:
  std::shared_ptr<WatchState> state_;
};

EtcdLockService::EtcdLockService(EtcdOptions options) : impl_(std::make_shared<Impl>()) {
  impl_->options = std::move(options);
  for (int i = 0; i < std::max(1, impl_->options.threads); ++i)
    impl_->threads.emplace_back([impl = impl_.get()] {
      SetThreadName("ms-etcd-lock");
      impl->Work();
    });
}

EtcdLockService::~EtcdLockService() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  for (std::thread& t : impl_->threads) t.join();
}

void EtcdLockService::OpenSession(absl::Duration ttl, Callback<absl::StatusOr<SessionId>> done) {
  if (ttl <= absl::ZeroDuration())
    return done(absl::InvalidArgumentError("a session's ttl must be positive"));
  const int64_t seconds =
      std::max<int64_t>(1, absl::ToInt64Seconds(absl::Ceil(ttl, absl::Seconds(1))));
  auto impl = impl_;
  auto parked = std::make_shared<Callback<absl::StatusOr<SessionId>>>(std::move(done));
  impl->Run([impl, seconds, parked]() {
    absl::StatusOr<Struct> r = impl->Call("/v3/lease/grant", StrCat("{\"TTL\":", seconds, "}"));
    if (!r.ok()) return (*parked)(r.status());
    const int64_t id = Int(*r, "ID");
    if (id == 0) return (*parked)(absl::InternalError("etcd granted no lease"));
    (*parked)(SessionId{id});
  });
}

void EtcdLockService::KeepAlive(SessionId session, Callback<absl::Status> done) {
  auto impl = impl_;
  auto parked = std::make_shared<Callback<absl::Status>>(std::move(done));
  impl->Run([impl, session, parked]() {
    absl::StatusOr<Struct> r =
        impl->Call("/v3/lease/keepalive", StrCat("{\"ID\":\"", session, "\"}"));
    if (!r.ok()) return (*parked)(r.status());
    const Struct* result = Object(*r, "result");
    // An ended lease is renewed to TTL 0.
    if (result == nullptr || Int(*result, "TTL") <= 0)
      return (*parked)(absl::NotFoundError(StrCat("lock service session ", session, " has ended")));
    (*parked)(absl::OkStatus());
  });
}

void EtcdLockService::CloseSession(SessionId session, Callback<absl::Status> done) {
  auto impl = impl_;
  auto parked = std::make_shared<Callback<absl::Status>>(std::move(done));
  impl->Run([impl, session, parked]() {
    absl::StatusOr<Struct> r = impl->Call("/v3/lease/revoke", StrCat("{\"ID\":\"", session, "\"}"));
    if (!r.ok() && !absl::IsNotFound(r.status())) return (*parked)(r.status());
    (*parked)(absl::OkStatus());
  });
}

void EtcdLockService::Put(std::string path, std::string contents, SessionId session,
                          Callback<absl::StatusOr<int64_t>> done) {
  if (absl::Status st = CheckPath(path); !st.ok()) return done(st);
  auto impl = impl_;
  auto parked = std::make_shared<Callback<absl::StatusOr<int64_t>>>(std::move(done));
  std::string body =
      StrCat("{\"key\":", Quote(B64(impl->Key(path))), ",\"value\":", Quote(B64(contents)),
             session != 0 ? StrCat(",\"lease\":\"", session, "\"") : "", "}");
  impl->Run([impl, body = std::move(body), parked]() {
    absl::StatusOr<Struct> r = impl->Call("/v3/kv/put", body);
    if (!r.ok()) return (*parked)(r.status());
    const Struct* header = Object(*r, "header");
    (*parked)(header == nullptr ? 0 : Int(*header, "revision"));
  });
}

void EtcdLockService::Create(std::string path, std::string contents, SessionId session,
                             Callback<absl::StatusOr<bool>> done) {
  if (absl::Status st = CheckPath(path); !st.ok()) return done(st);
  auto impl = impl_;
  auto parked = std::make_shared<Callback<absl::StatusOr<bool>>>(std::move(done));
  const std::string key = Quote(B64(impl->Key(path)));
  std::string body =
      StrCat("{\"compare\":[{\"key\":", key, ",\"target\":\"CREATE\",\"create_revision\":\"0\"}],",
             "\"success\":[{\"request_put\":{\"key\":", key, ",\"value\":", Quote(B64(contents)),
             session != 0 ? StrCat(",\"lease\":\"", session, "\"") : "", "}}]}");
  impl->Run([impl, body = std::move(body), parked]() {
    absl::StatusOr<Struct> r = impl->Call("/v3/kv/txn", body);
    if (!r.ok()) return (*parked)(r.status());
    const Value* ok = Field(*r, "succeeded");
    (*parked)(ok != nullptr && ok->bool_value());
  });
}

void EtcdLockService::Get(std::string path,
                          Callback<absl::StatusOr<std::optional<FileInfo>>> done) {
  if (absl::Status st = CheckPath(path); !st.ok()) return done(st);
  auto impl = impl_;
  auto parked =
      std::make_shared<Callback<absl::StatusOr<std::optional<FileInfo>>>>(std::move(done));
  std::string body = StrCat("{\"key\":", Quote(B64(impl->Key(path))), "}");
  impl->Run([impl, body = std::move(body), parked]() {
    absl::StatusOr<Struct> r = impl->Call("/v3/kv/range", body);
    if (!r.ok()) return (*parked)(r.status());
    std::vector<const Struct*> kvs = Objects(*r, "kvs");
    if (kvs.empty()) return (*parked)(std::optional<FileInfo>());
    (*parked)(std::optional<FileInfo>(impl->File(*kvs.front())));
  });
}

void EtcdLockService::List(std::string prefix, Callback<absl::StatusOr<Listing>> done) {
  auto impl = impl_;
  auto parked = std::make_shared<Callback<absl::StatusOr<Listing>>>(std::move(done));
  const std::string key = impl->Key(prefix);
  std::string body = StrCat("{\"key\":", Quote(B64(key.empty() ? std::string(1, '\0') : key)),
                            ",\"range_end\":", Quote(B64(PrefixEnd(key))), "}");
  impl->Run([impl, body = std::move(body), parked]() {
    absl::StatusOr<Struct> r = impl->Call("/v3/kv/range", body);
    if (!r.ok()) return (*parked)(r.status());
    Listing out;
    for (const Struct* kv : Objects(*r, "kvs")) out.files.push_back(impl->File(*kv));
    if (const Struct* header = Object(*r, "header")) out.revision = Int(*header, "revision");
    (*parked)(std::move(out));
  });
}

void EtcdLockService::Delete(std::string path, int64_t if_version,
                             Callback<absl::StatusOr<bool>> done) {
  if (absl::Status st = CheckPath(path); !st.ok()) return done(st);
  auto impl = impl_;
  auto parked = std::make_shared<Callback<absl::StatusOr<bool>>>(std::move(done));
  const std::string key = Quote(B64(impl->Key(path)));
  std::string body = if_version == 0
                         ? StrCat("{\"key\":", key, "}")
                         : StrCat("{\"compare\":[{\"key\":", key,
                                  ",\"target\":\"MOD\",\"mod_revision\":\"", if_version, "\"}],",
                                  "\"success\":[{\"request_delete_range\":{\"key\":", key, "}}]}");
  impl->Run([impl, body = std::move(body), parked, conditional = if_version != 0]() {
    absl::StatusOr<Struct> r = impl->Call(conditional ? "/v3/kv/txn" : "/v3/kv/deleterange", body);
    if (!r.ok()) return (*parked)(r.status());
    if (!conditional) return (*parked)(Int(*r, "deleted") > 0);
    const Value* ok = Field(*r, "succeeded");
    (*parked)(ok != nullptr && ok->bool_value());
  });
}

std::unique_ptr<LockService::Watch> EtcdLockService::WatchPrefix(
    std::string prefix, int64_t after, std::function<void(const WatchEvent&)> on_event,
    std::function<void(const absl::Status&)> on_error) {
  auto w = std::make_shared<WatchState>();
  auto impl = impl_;
  const std::string key = impl->Key(prefix);
  std::string body = StrCat(
      "{\"create_request\":{\"key\":", Quote(B64(key.empty() ? std::string(1, '\0') : key)),
      ",\"range_end\":", Quote(B64(PrefixEnd(key))), ",\"start_revision\":\"", after + 1, "\"}}");
  std::lock_guard<std::mutex> started(w->mu);  // w->thread is set before the thread looks at it
  w->thread = std::thread([impl, w, body = std::move(body), on_event = std::move(on_event),
                           on_error = std::move(on_error)] {
    auto cancelled = [&w] {
      std::lock_guard<std::mutex> lock(w->mu);
      return w->cancelled;
    };
    auto fail = [&](const absl::Status& s) {
      if (!cancelled()) on_error(s);
    };
    asio::io_context io;
    tcp::socket socket(io);
    if (impl->options.endpoints.empty())
      return fail(absl::UnavailableError("no etcd endpoint configured"));
    const std::string& endpoint = impl->options.endpoints.front();
    if (absl::Status s = Connect(io, socket, endpoint); !s.ok()) return fail(s);
    {
      std::lock_guard<std::mutex> lock(w->mu);
      if (w->cancelled) return;
      w->fd = socket.native_handle();
    }
    boost::system::error_code ec;
    auto req = Request(endpoint, "/v3/watch", body);
    bhttp::write(socket, req, ec);
    boost::beast::flat_buffer buffer;
    bhttp::response_parser<bhttp::empty_body> parser;
    parser.body_limit(boost::none);
    if (!ec) bhttp::read_header(socket, buffer, parser, ec);
    if (ec) return fail(absl::UnavailableError(StrCat("etcd watch: ", ec.message())));
    // The stream: JSON objects, one per line, in chunks.
    std::string pending;
    bool stop = false;
    std::function<size_t(uint64_t, boost::beast::string_view, boost::system::error_code&)>
        on_chunk = [&](uint64_t, boost::beast::string_view data, boost::system::error_code&) {
          pending.append(data.data(), data.size());
          size_t nl;
          while (!stop && (nl = pending.find('\n')) != std::string::npos) {
            const std::string line = pending.substr(0, nl);
            pending.erase(0, nl + 1);
            if (line.empty()) continue;
            absl::StatusOr<Struct> msg = ParseJson(line, "/v3/watch");
            if (!msg.ok()) {
              fail(msg.status());
              stop = true;
              break;
            }
            const Struct* result = Object(*msg, "result");
            if (result == nullptr) continue;
            if (Int(*result, "compact_revision") > 0 ||
                (Field(*result, "canceled") != nullptr &&
                 Field(*result, "canceled")->bool_value())) {
              fail(absl::OutOfRangeError(
                  "etcd cancelled the watch (its revision was compacted): list again"));
              stop = true;
              break;
            }
            for (const Struct* e : Objects(*result, "events")) {
              const Struct* kv = Object(*e, "kv");
              if (kv == nullptr) continue;
              WatchEvent ev;
              const Value* type = Field(*e, "type");
              ev.type = type != nullptr && type->string_value() == "DELETE"
                            ? WatchEvent::Type::kDelete
                            : WatchEvent::Type::kPut;
              FileInfo f = impl->File(*kv);
              ev.path = std::move(f.path);
              ev.contents = std::move(f.contents);
              ev.revision = f.version;
              if (cancelled()) {
                stop = true;
                break;
              }
              on_event(ev);
            }
          }
          return data.size();
        };
    parser.on_chunk_body(on_chunk);
    // No read timeout: a quiet prefix sends nothing.
    timeval none{};
    ::setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none));
    while (!stop && !parser.is_done()) {
      bhttp::read(socket, buffer, parser, ec);
      if (ec == bhttp::error::end_of_chunk) {
        ec = {};
        continue;
      }
      if (ec) break;
    }
    if (!stop && !cancelled())
      fail(absl::UnavailableError(StrCat("etcd watch ended: ", ec.message())));
    std::lock_guard<std::mutex> lock(w->mu);
    w->fd = -1;
  });
  return std::make_unique<EtcdWatch>(w);
}

}  // namespace megastore::storage::lock
