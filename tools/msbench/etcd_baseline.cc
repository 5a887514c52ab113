#include "tools/msbench/etcd_baseline.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/random.h"
#include "base/status.h"
#include "base/strings.h"
#include "tools/msbench/bench_cluster.h"

namespace megastore::tools {
namespace {

// A reply larger than this is not etcd answering a put.
constexpr size_t kMaxReply = 1 << 20;

// One HTTP/1.1 keep-alive connection to 127.0.0.1:port.
class HttpConnection {
 public:
  explicit HttpConnection(int port) : port_(port) {}
  ~HttpConnection() { Close(); }

  // POSTs `body` (JSON) to `path`; the reply's status and body.
  absl::Status Post(const std::string& path, const std::string& body, int* status,
                    std::string* reply) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (fd_ < 0) MS_RETURN_IF_ERROR(Connect());
      const std::string request = StrCat("POST ", path,
                                         " HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                         "Content-Type: application/json\r\nContent-Length: ",
                                         body.size(), "\r\n\r\n", body);
      if (!SendAll(request)) {  // the server closed an idle connection: once more
        Close();
        continue;
      }
      absl::Status read = ReadReply(status, reply);
      if (read.ok()) return read;
      Close();
      if (attempt == 1 || !absl::IsUnavailable(read)) return read;
    }
    return absl::UnavailableError(StrCat("127.0.0.1:", port_, ": connection lost"));
  }

 private:
  absl::Status Connect() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) return absl::UnavailableError("socket() failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      Close();
      return absl::UnavailableError(StrCat("cannot connect to 127.0.0.1:", port_));
    }
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    buffer_.clear();
    return absl::OkStatus();
  }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool SendAll(const std::string& data) {
    size_t sent = 0;
    while (sent < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }
  // Reads more into buffer_; false at end of stream or on error.
  bool Fill() {
    if (buffer_.size() > kMaxReply) return false;
    char chunk[16384];
    const ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (n <= 0) return false;
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }
  absl::Status ReadReply(int* status, std::string* reply) {
    size_t end;
    while ((end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill()) return absl::UnavailableError("the connection closed before a reply");
    }
    const std::string head = buffer_.substr(0, end);
    buffer_.erase(0, end + 4);
    if (head.size() < 12 || head.compare(0, 9, "HTTP/1.1 ") != 0 ||
        !absl::SimpleAtoi(head.substr(9, 3), status))
      return absl::DataLossError(StrCat("not an HTTP reply: ", head.substr(0, 40)));
    size_t length = 0;
    bool chunked = false;
    for (absl::string_view line : absl::StrSplit(head, "\r\n")) {
      const std::string lower = absl::AsciiStrToLower(line);
      if (absl::StartsWith(lower, "content-length:")) {
        if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(15)), &length) ||
            length > kMaxReply)
          return absl::DataLossError(StrCat("bad Content-Length: ", line));
      } else if (absl::StartsWith(lower, "transfer-encoding:") &&
                 lower.find("chunked") != std::string::npos) {
        chunked = true;
      }
    }
    reply->clear();
    if (!chunked) {
      while (buffer_.size() < length)
        if (!Fill()) return absl::UnavailableError("the connection closed inside a reply");
      reply->assign(buffer_, 0, length);
      buffer_.erase(0, length);
      return absl::OkStatus();
    }
    for (;;) {  // chunked: SIZE\r\nDATA\r\n ... 0\r\n\r\n
      size_t eol;
      while ((eol = buffer_.find("\r\n")) == std::string::npos)
        if (!Fill()) return absl::UnavailableError("the connection closed inside a reply");
      size_t size = 0;
      const std::string hex = buffer_.substr(0, buffer_.find_first_of(";\r"));
      if (hex.empty() || hex.size() > 8 || !absl::SimpleHexAtoi(hex, &size) ||
          reply->size() + size > kMaxReply)
        return absl::DataLossError("bad chunk size");
      while (buffer_.size() < eol + 2 + size + 2)
        if (!Fill()) return absl::UnavailableError("the connection closed inside a reply");
      reply->append(buffer_, eol + 2, size);
      buffer_.erase(0, eol + 2 + size + 2);
      if (size == 0) return absl::OkStatus();
    }
  }

  const int port_;
  int fd_ = -1;
  std::string buffer_;
};

std::string PutBody(const std::string& key, const std::string& value) {
  return StrCat("{\"key\":\"", absl::Base64Escape(key), "\",\"value\":\"",
                absl::Base64Escape(value), "\"}");
}

absl::Status PutOn(HttpConnection& c, const std::string& key, const std::string& value) {
  int status = 0;
  std::string reply;
  MS_RETURN_IF_ERROR(c.Post("/v3/kv/put", PutBody(key, value), &status, &reply));
  if (status != 200 || reply.find("\"header\"") == std::string::npos)
    return absl::UnavailableError(StrCat("etcd answered ", status, ": ", reply.substr(0, 200)));
  return absl::OkStatus();
}

}  // namespace

absl::Status EtcdPut(int port, const std::string& key, const std::string& value) {
  HttpConnection c(port);
  return PutOn(c, key, value);
}

absl::StatusOr<std::unique_ptr<EtcdBaseline>> EtcdBaseline::Start(const std::string& binary,
                                                                  const std::string& dir,
                                                                  int members) {
  if (::access(binary.c_str(), X_OK) != 0)
    return absl::FailedPreconditionError(
        StrCat(binary, " is not there (./ms deps installs Debian's etcd-server)"));
  std::unique_ptr<EtcdBaseline> b(new EtcdBaseline());
  std::vector<int> peer_ports;
  std::string initial;
  for (int i = 0; i < members; ++i) {
    const int client = FreePort(), peer = FreePort();
    if (client == 0 || peer == 0) return absl::UnavailableError("no free loopback port for etcd");
    b->client_ports_.push_back(client);
    peer_ports.push_back(peer);
    initial += StrCat(i == 0 ? "" : ",", "m", i, "=http://127.0.0.1:", peer);
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  for (int i = 0; i < members; ++i) {
    const std::string client =
        StrCat("http://127.0.0.1:", b->client_ports_[static_cast<size_t>(i)]);
    const std::string peer = StrCat("http://127.0.0.1:", peer_ports[static_cast<size_t>(i)]);
    const std::string log = StrCat(dir, "/m", i, ".log");
    auto p = std::make_unique<ChildProcess>();
    if (!p->Start({binary, StrCat("--name=m", i), StrCat("--data-dir=", dir, "/m", i),
                   "--listen-client-urls=" + client, "--advertise-client-urls=" + client,
                   "--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
                   "--initial-cluster=" + initial, "--initial-cluster-state=new",
                   "--initial-cluster-token=msbench", "--logger=zap", "--log-outputs=" + log,
                   "--log-level=error"},
                  log, ""))
      return absl::UnavailableError(StrCat("cannot start ", binary));
    b->members_.push_back(std::move(p));
  }
  // Ready once a put goes through every member (there is a leader).
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  for (int i = 0; i < members; ++i) {
    absl::Status s;
    while (!(s = EtcdPut(b->client_ports_[static_cast<size_t>(i)], "msbench/ready", "1")).ok()) {
      if (b->members_[static_cast<size_t>(i)]->Exited())
        return absl::UnavailableError(
            StrCat("etcd member m", i, " exited (see ", dir, "/m", i, ".log)"));
      if (absl::Now() > deadline)
        return absl::UnavailableError(StrCat("etcd did not take a put within 30 s: ", s.message(),
                                             " (see ", dir, "/m*.log)"));
      absl::SleepFor(absl::Milliseconds(100));
    }
  }
  return b;
}

EtcdBaseline::~EtcdBaseline() {
  for (auto& m : members_) m->Kill(15);
}

EtcdFigures EtcdBaseline::Measure(int clients, int64_t keys, int64_t value_size, double seconds,
                                  uint64_t seed) {
  const std::string value(static_cast<size_t>(value_size), 'x');
  std::atomic<bool> stop{false};
  std::vector<std::vector<double>> latencies(static_cast<size_t>(clients));
  std::vector<uint64_t> errors(static_cast<size_t>(clients), 0);
  std::vector<std::string> first_error(static_cast<size_t>(clients));
  std::vector<std::thread> threads;
  auto members_cpu = [&] {
    double cpu = 0;
    for (const auto& m : members_) cpu += m->CpuSeconds();
    return cpu;
  };
  const double cpu_before = members_cpu();
  const absl::Time start = absl::Now();
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      Random rng(seed * 1000003 + static_cast<uint64_t>(c));
      HttpConnection conn(client_ports_[static_cast<size_t>(c) % client_ports_.size()]);
      while (!stop.load(std::memory_order_relaxed)) {
        const std::string key =
            StrCat("bench/", rng.Uniform(static_cast<uint64_t>(std::max<int64_t>(keys, 1))));
        const absl::Time t0 = absl::Now();
        absl::Status s = PutOn(conn, key, value);
        if (s.ok()) {
          latencies[static_cast<size_t>(c)].push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
        } else {
          if (errors[static_cast<size_t>(c)]++ == 0)
            first_error[static_cast<size_t>(c)] = s.ToString();
          absl::SleepFor(absl::Milliseconds(10));
        }
      }
    });
  }
  absl::SleepFor(absl::Seconds(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  const double cpu = members_cpu() - cpu_before;
  EtcdFigures f;
  std::vector<double> all;
  for (size_t c = 0; c < latencies.size(); ++c) {
    all.insert(all.end(), latencies[c].begin(), latencies[c].end());
    f.errors += errors[c];
    if (f.first_error.empty()) f.first_error = first_error[c];
  }
  f.puts_per_s = static_cast<double>(all.size()) / elapsed;
  if (!all.empty()) f.cpu_us_per_put = cpu * 1e6 / static_cast<double>(all.size());
  f.p50_ms = Percentile(all, 0.50);
  f.p99_ms = Percentile(all, 0.99);
  return f;
}

}  // namespace megastore::tools
