#include "server/cluster.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "base/file.h"
#include "base/status.h"
#include "base/strings.h"

namespace megastore::server {

namespace {

class Collector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (first.empty()) first = StrCat(line + 1, ":", column + 1, ": ", message);
  }
  std::string first;
};

}  // namespace

const char* TypeName(replication::ReplicaType t) {
  switch (t) {
    case replication::ReplicaType::kWitness:
      return "witness";
    case replication::ReplicaType::kReadOnly:
      return "read-only";
    default:
      return "full";
  }
}

replication::ReplicaType TypeOf(const DatacenterConfig& dc) {
  if (dc.type() == "witness") return replication::ReplicaType::kWitness;
  if (dc.type() == "read-only") return replication::ReplicaType::kReadOnly;
  return replication::ReplicaType::kFull;
}

const char* RoleName(Role role) {
  switch (role) {
    case Role::kTablet:
      return "tablet";
    case Role::kLock:
      return "lock";
    case Role::kCoordinator:
      return "coordinator";
    case Role::kReplication:
      return "replication";
    case Role::kMaster:
      return "master";
  }
  return "?";
}

absl::StatusOr<std::vector<Role>> ParseRoles(std::string_view text) {
  if (text == "all") return std::vector<Role>(std::begin(kAllRoles), std::end(kAllRoles));
  std::vector<Role> out;
  for (size_t start = 0; start <= text.size();) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    const std::string_view name = text.substr(start, comma - start);
    start = comma + 1;
    bool known = false;
    for (Role r :
         {Role::kTablet, Role::kLock, Role::kCoordinator, Role::kReplication, Role::kMaster}) {
      if (name != RoleName(r)) continue;
      known = true;
      if (std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
    }
    if (!known)
      return absl::InvalidArgumentError(
          StrCat("unknown role \"", name,
                 "\" (roles: tablet, lock, coordinator, replication, master, or all)"));
  }
  return out;
}

const std::string& AddressOf(const DatacenterConfig& dc, Role role) {
  const RoleAddresses& r = dc.roles();
  const std::string* own = nullptr;
  switch (role) {
    case Role::kTablet:
      own = &r.tablet();
      break;
    case Role::kLock:
      own = &r.lock();
      break;
    case Role::kCoordinator:
      own = &r.coordinator();
      break;
    case Role::kReplication:
      own = &r.replication();
      break;
    case Role::kMaster:
      break;
  }
  if (own == nullptr) return dc.address();
  return own->empty() ? dc.address() : *own;
}

std::vector<std::pair<std::string, std::vector<Role>>> ProcessesOf(const DatacenterConfig& dc) {
  std::vector<std::pair<std::string, std::vector<Role>>> out;
  for (Role role : kAllRoles) {
    if (role == Role::kCoordinator && TypeOf(dc) != replication::ReplicaType::kFull) continue;
    if (role == Role::kTablet && !dc.bigtable_cell().name().empty())
      continue;  // the cell's own processes
    const std::string& address = AddressOf(dc, role);
    auto it =
        std::find_if(out.begin(), out.end(), [&](const auto& p) { return p.first == address; });
    if (it == out.end()) it = out.insert(out.end(), {address, {}});
    it->second.push_back(role);
  }
  return out;
}

absl::Duration MaxClockSkewOf(const ClusterConfig& config) {
  return config.max_clock_skew_ms() == 0 ? replication::kDefaultMaxClockSkew
                                         : absl::Milliseconds(config.max_clock_skew_ms());
}

replication::LogCleanupOptions LogCleanupOf(const ClusterConfig& config) {
  const LogCleanupConfig& c = config.log_cleanup();
  replication::LogCleanupOptions o;
  o.enabled = !c.disabled();
  o.require_backup = !c.without_backup();
  if (c.keep_positions() != 0) o.keep_positions = c.keep_positions();
  if (c.has_keep_age_seconds()) o.keep_age = absl::Seconds(c.keep_age_seconds());
  if (c.max_positions() != 0) o.max_positions = c.max_positions();
  if (c.interval_seconds() != 0) o.interval = absl::Seconds(c.interval_seconds());
  return o;
}

absl::StatusOr<ClusterConfig> ParseClusterConfig(const std::string& text, std::string_view file,
                                                 bool local_mode) {
  ClusterConfig config;
  google::protobuf::TextFormat::Parser parser;
  Collector errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &config))
    return absl::InvalidArgumentError(StrCat(file, ":", errors.first));
  if (config.max_clock_skew_ms() > 3600'000)
    return absl::InvalidArgumentError(
        StrCat(file, ": max_clock_skew_ms ", config.max_clock_skew_ms(), " is more than an hour"));
  {
    const replication::LogCleanupOptions cleanup = LogCleanupOf(config);
    if (cleanup.keep_positions > cleanup.max_positions)
      return absl::InvalidArgumentError(StrCat(
          file, ": log_cleanup keeps ", cleanup.keep_positions,
          " positions (keep_positions), more than its max_positions ", cleanup.max_positions));
    if (cleanup.max_positions > 100'000'000)
      return absl::InvalidArgumentError(
          StrCat(file, ": log_cleanup max_positions ", cleanup.max_positions,
                 " is more than 100000000 (a root row that large is what clean-up prevents)"));
    if (config.log_cleanup().interval_seconds() > 86400)
      return absl::InvalidArgumentError(StrCat(file, ": log_cleanup interval_seconds ",
                                               config.log_cleanup().interval_seconds(),
                                               " is more than a day"));
  }
  if (config.datacenters().empty())
    return absl::InvalidArgumentError(StrCat(file, ": no datacenters"));
  std::set<std::string> names;
  int full = 0;
  for (const DatacenterConfig& dc : config.datacenters()) {
    if (dc.name().empty())
      return absl::InvalidArgumentError(StrCat(file, ": a datacenter has no name"));
    if (!names.insert(dc.name()).second)
      return absl::InvalidArgumentError(
          StrCat(file, ": datacenter ", dc.name(), " is named twice"));
    if (dc.has_bigtable_cell()) {
      const BigtableCell& cell = dc.bigtable_cell();
      if (cell.name().empty() || cell.lock_service().empty())
        return absl::InvalidArgumentError(StrCat(
            file, ": datacenter ", dc.name(), ": bigtable_cell needs both name and lock_service"));
      if (local_mode)
        return absl::InvalidArgumentError(
            StrCat(file, ": datacenter ", dc.name(),
                   ": bigtable_cell needs the cell's own processes; run it with "
                   "--config --datacenter, not --local"));
    }
    if (!dc.type().empty() && dc.type() != "full" && dc.type() != "witness" &&
        dc.type() != "read-only")
      return absl::InvalidArgumentError(StrCat(file, ": datacenter ", dc.name(), ": type \"",
                                               dc.type(), "\" is not full, witness or read-only"));
    full += TypeOf(dc) == replication::ReplicaType::kFull ? 1 : 0;
    for (Role role : kAllRoles) {
      const std::string& address = AddressOf(dc, role);
      const std::string what =
          StrCat(file, ": datacenter ", dc.name(), ": ",
                 address == dc.address() ? "address" : StrCat("roles.", RoleName(role)));
      const size_t colon = address.rfind(':');
      if (address.empty())
        return absl::InvalidArgumentError(
            StrCat(what, " is missing (HOST:PORT where the ", RoleName(role), " role listens)"));
      if (colon == std::string::npos || colon == 0)
        return absl::InvalidArgumentError(StrCat(what, " \"", address, "\" is not HOST:PORT"));
      if (!local_mode && address.substr(colon + 1) == "0")
        return absl::InvalidArgumentError(
            StrCat(what, ": port 0 only works in local mode (megastored --local)"));
      if (local_mode && address != dc.address())
        return absl::InvalidArgumentError(StrCat(what,
                                                 ": megastored --local runs each datacenter in one "
                                                 "place; roles { } is for separate processes"));
    }
  }
  if (full == 0) return absl::InvalidArgumentError(StrCat(file, ": no full replica"));
  if (config.has_backup()) {
    const BackupScheduleConfig& b = config.backup();
    if (b.dir().empty())
      return absl::InvalidArgumentError(StrCat(file, ": backup needs dir (the backup directory)"));
    if (!b.datacenter().empty()) {
      const DatacenterConfig* dc = nullptr;
      for (const DatacenterConfig& d : config.datacenters())
        if (d.name() == b.datacenter()) dc = &d;
      if (dc == nullptr)
        return absl::InvalidArgumentError(
            StrCat(file, ": backup datacenter ", b.datacenter(), " is not in the config"));
      if (TypeOf(*dc) == replication::ReplicaType::kWitness)
        return absl::InvalidArgumentError(StrCat(file, ": backup datacenter ", b.datacenter(),
                                                 " is a witness: it keeps no data to back up"));
    }
    if (b.log_interval_seconds() > 7 * 86400 || b.full_interval_seconds() > 366 * 86400)
      return absl::InvalidArgumentError(
          StrCat(file, ": backup intervals are at most a week (log) and a year (full)"));
    if (b.retention_seconds() > 100ull * 366 * 86400)
      return absl::InvalidArgumentError(
          StrCat(file, ": backup retention_seconds ", b.retention_seconds(), " is over a century"));
  }
  bool any_tls = config.has_tls();
  for (const DatacenterConfig& dc : config.datacenters()) any_tls |= dc.has_tls();
  if (any_tls) {
    for (const DatacenterConfig& dc : config.datacenters()) {
      const tls::TlsFiles f = ServerTlsOf(config, dc);
      for (const auto& [field, value] :
           {std::pair{"ca", f.ca}, std::pair{"cert", f.cert}, std::pair{"key", f.key}})
        if (value.empty())
          return absl::InvalidArgumentError(
              StrCat(file, ": datacenter ", dc.name(), " has no tls.", field,
                     " (TLS is on for every process once the config names it: set it "
                     "in the datacenter's tls or the cluster's)"));
    }
  }
  if (config.has_client_tls()) {
    const tls::TlsFiles f = ClientTlsOf(config);
    if (f.ca.empty() || f.cert.empty() || f.key.empty())
      return absl::InvalidArgumentError(StrCat(
          file, ": client_tls needs cert and key, and a ca (its own or the cluster's tls.ca)"));
  }
  for (const Link& l : config.links()) {
    for (const std::string& end : {l.a(), l.b()})
      if (!names.count(end))
        return absl::InvalidArgumentError(
            StrCat(file, ": link ", l.a(), "-", l.b(), " names no datacenter ", end));
    // The emulated delay of one message: beyond ten seconds every request
    // would time out, so it is a mistake, not a WAN.
    if (l.one_way_ms() > 10'000)
      return absl::InvalidArgumentError(StrCat(file, ": link ", l.a(), "-", l.b(), ": one_way_ms ",
                                               l.one_way_ms(),
                                               " is more than 10000 (10 s one way)"));
  }
  return config;
}

absl::StatusOr<ClusterConfig> LoadClusterConfig(const std::string& path, bool local_mode) {
  // A config is a few kilobytes; anything past a megabyte (a device, a log
  // file given by mistake) is refused before it is read into memory.
  absl::StatusOr<std::string> text = ReadFileToString(path, 1 << 20);
  if (!text.ok()) {
    return absl::Status(
        text.status().code(),
        StrCat("cannot read cluster config ", path, ": ",
               absl::IsNotFound(text.status()) ? "no such file" : text.status().message()));
  }
  MS_ASSIGN_OR_RETURN(ClusterConfig config, ParseClusterConfig(*text, path, local_mode));
  // Relative TLS paths are the config directory's.
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  auto resolve = [&](TlsConfig* t) {
    for (std::string* f : {t->mutable_ca(), t->mutable_cert(), t->mutable_key()})
      if (!f->empty() && (*f)[0] != '/') *f = dir + *f;
  };
  if (config.has_tls()) resolve(config.mutable_tls());
  if (config.has_client_tls()) resolve(config.mutable_client_tls());
  for (DatacenterConfig& dc : *config.mutable_datacenters())
    if (dc.has_tls()) resolve(dc.mutable_tls());
  return config;
}

absl::StatusOr<ClusterConfig> LoadClusterConfigForClient(const std::string& path) {
  MS_ASSIGN_OR_RETURN(ClusterConfig config, LoadClusterConfig(path));
  if (!tls::DefaultTls().enabled() && config.has_client_tls()) {
    const tls::TlsFiles files = ClientTlsOf(config);
    if (absl::Status s = tls::CheckTls(files); !s.ok())
      return absl::InvalidArgumentError(StrCat(path, ": client_tls: ", s.message()));
    tls::SetDefaultTls(files);
  }
  return config;
}

tls::TlsFiles ServerTlsOf(const ClusterConfig& config, const DatacenterConfig& dc) {
  auto pick = [](const std::string& own, const std::string& cluster) {
    return own.empty() ? cluster : own;
  };
  if (!config.has_tls() && !dc.has_tls()) return {};
  return tls::TlsFiles{pick(dc.tls().ca(), config.tls().ca()),
                       pick(dc.tls().cert(), config.tls().cert()),
                       pick(dc.tls().key(), config.tls().key())};
}

tls::TlsFiles ClientTlsOf(const ClusterConfig& config) {
  if (!config.has_client_tls()) return {};
  const TlsConfig& c = config.client_tls();
  return tls::TlsFiles{c.ca().empty() ? config.tls().ca() : c.ca(), c.cert(), c.key()};
}

std::string ToText(const ClusterConfig& config) {
  std::string out;
  google::protobuf::TextFormat::PrintToString(config, &out);
  return out;
}

std::vector<replication::ReplicaInfo> ReplicasOf(const ClusterConfig& config) {
  std::vector<replication::ReplicaInfo> out;
  for (const DatacenterConfig& dc : config.datacenters()) {
    replication::ReplicaInfo r;
    r.name = dc.name();
    r.type = TypeOf(dc);
    r.replication = AddressOf(dc, Role::kReplication);
    r.lock_service = AddressOf(dc, Role::kLock);
    if (r.type == replication::ReplicaType::kFull)
      r.coordinator = AddressOf(dc, Role::kCoordinator);
    out.push_back(std::move(r));
  }
  return out;
}

std::map<std::pair<std::string, std::string>, absl::Duration> DelaysOf(
    const ClusterConfig& config) {
  std::map<std::pair<std::string, std::string>, absl::Duration> out;
  for (const Link& l : config.links()) {
    out[{l.a(), l.b()}] = absl::Milliseconds(l.one_way_ms());
    out[{l.b(), l.a()}] = absl::Milliseconds(l.one_way_ms());
  }
  return out;
}

DelayedTransport::OneWay OneWayFrom(const ClusterConfig& config, const std::string& here) {
  std::map<std::string, std::string> dc_of;  // address -> datacenter
  for (const DatacenterConfig& dc : config.datacenters())
    for (Role role : kAllRoles) dc_of[AddressOf(dc, role)] = dc.name();
  return [here, dc_of = std::move(dc_of), delays = DelaysOf(config)](std::string_view to) {
    auto dc = dc_of.find(std::string(to));
    if (dc == dc_of.end()) return absl::ZeroDuration();
    auto d = delays.find({here, dc->second});
    return d == delays.end() ? absl::ZeroDuration() : d->second;
  };
}

ClusterConfig DefaultLocalConfig(int datacenters) {
  ClusterConfig c;
  for (int i = 0; i < datacenters; ++i) {
    DatacenterConfig* dc = c.add_datacenters();
    dc->set_name(std::string(1, static_cast<char>('A' + i)));
    dc->set_type("full");
    dc->set_address("127.0.0.1:0");
  }
  const uint32_t delays[3][3] = {{0, 10, 30}, {10, 0, 25}, {30, 25, 0}};
  for (int i = 0; i < datacenters && i < 3; ++i)
    for (int j = i + 1; j < datacenters && j < 3; ++j) {
      Link* l = c.add_links();
      l->set_a(c.datacenters(i).name());
      l->set_b(c.datacenters(j).name());
      l->set_one_way_ms(delays[i][j]);
    }
  return c;
}

}  // namespace megastore::server
