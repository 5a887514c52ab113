// msadmin backup create|log|list|verify (docs/backup.md).
#include "tools/msadmin/backup.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <map>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "backup/backup_file.h"
#include "backup/backup_job.h"
#include "backup/backup_verify.h"
#include "backup/restore.h"
#include "base/cli.h"
#include "base/coding.h"
#include "base/rpc/rpc_transport.h"
#include "base/strings.h"
#include "schema/key_codec.h"
#include "schema/layout.h"
#include "server/cluster.h"
#include "tools/msadmin/cluster_internal.h"

namespace megastore::tools {

namespace {

using cluster_internal::Failed;
using cluster_internal::Usage;

std::atomic<bool> g_cancel{false};

extern "C" void OnSignal(int) {
  if (g_cancel.exchange(true)) std::_Exit(130);  // a second ^C: now
  static const char kMsg[] =
      "\nmsadmin backup: stopping after the current chunk (run the same command again to "
      "resume; ^C again to quit now)\n";
  (void)!::write(2, kMsg, sizeof kMsg - 1);
}

std::string Megabytes(uint64_t bytes) {
  return StrCat(fmt::format("{:.1f}", static_cast<double>(bytes) / 1e6), " MB");
}

std::string Duration(double seconds) {
  if (seconds < 90) return StrCat(static_cast<int64_t>(seconds + 0.5), " s");
  if (seconds < 5400) return StrCat(static_cast<int64_t>(seconds / 60 + 0.5), " min");
  return StrCat(fmt::format("{:.1f}", seconds / 3600), " h");
}

// Progress on stderr: one line rewritten in place on a terminal, a line
// every five seconds otherwise.
class ProgressLine {
 public:
  explicit ProgressLine(bool quiet) : quiet_(quiet), tty_(::isatty(2) != 0) {}
  ~ProgressLine() {
    if (drawn_) std::fputc('\n', stderr);
  }
  void Show(const backup::Progress& p) {
    if (quiet_) return;
    const absl::Time now = absl::Now();
    if (now - last_ < (tty_ ? absl::Milliseconds(200) : absl::Seconds(5))) return;
    last_ = now;
    const std::optional<absl::Duration> eta = p.Eta();
    const std::string line =
        StrCat(p.kind == backup::FULL ? "backup create" : "backup log", " ", p.job, ": ",
               p.groups_done, "/", p.groups_total, " groups, ", Megabytes(p.bytes), ", ",
               Megabytes(static_cast<uint64_t>(p.Rate())), "/s, ETA ",
               eta ? Duration(absl::ToDoubleSeconds(*eta)) : "?");
    if (tty_) {
      std::fprintf(stderr, "\r%-100s", line.c_str());
      drawn_ = true;
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
  }

 private:
  const bool quiet_, tty_;
  bool drawn_ = false;
  absl::Time last_ = absl::InfinitePast();
};

// The datacenter to read from: --datacenter, or the first full replica.
absl::StatusOr<const server::DatacenterConfig*> SourceOf(const BackupState& s,
                                                         const server::ClusterConfig& config) {
  for (const server::DatacenterConfig& dc : config.datacenters()) {
    const bool data = dc.type() != "witness";
    if (!s.datacenter.empty() && dc.name() == s.datacenter) {
      if (!data)
        return absl::InvalidArgumentError(
            StrCat("--datacenter ", s.datacenter, " is a witness: it keeps no data to back up"));
      return &dc;
    }
    if (s.datacenter.empty() && (dc.type().empty() || dc.type() == "full")) return &dc;
  }
  return absl::InvalidArgumentError(s.datacenter.empty()
                                        ? StrCat("no full replica in ", s.config)
                                        : StrCat("no datacenter ", s.datacenter, " in ", s.config));
}

int Take(const BackupState& s) {
  absl::StatusOr<server::ClusterConfig> config = server::LoadClusterConfigForClient(s.config);
  if (!config.ok()) return Usage(std::string(config.status().message()));
  if (s.command == "create" && s.groups.empty() && !s.all)
    return Usage("backup create: name the groups (ROOT_TABLE:KEY ...) or give --all");
  if (s.all && !s.groups.empty()) return Usage("give groups or --all, not both");
  absl::StatusOr<const server::DatacenterConfig*> source = SourceOf(s, *config);
  if (!source.ok()) return Usage(std::string(source.status().message()));
  const absl::Duration timeout = absl::Seconds(s.timeout);
  absl::StatusOr<schema::SchemaDescriptor> schema =
      s.schema.find('.') != std::string::npos
          ? cluster_internal::ReadSchemaFile(s.schema)
          : cluster_internal::AppliedSchema(*config, s.schema, timeout);
  if (!schema.ok()) return Usage(std::string(schema.status().message()));

  backup::JobOptions o;
  rpc::RpcTransport transport;
  o.dir = s.dir;
  o.transport = &transport;
  o.datacenter = (*source)->name();
  o.replication = server::AddressOf(**source, server::Role::kReplication);
  o.timeout = timeout;
  o.schema = *schema;
  o.kind = s.command == "create" ? backup::FULL : backup::LOG;
  o.all = s.all;
  for (const std::string& g : s.groups) {
    ClusterState cs;
    cs.config = s.config;
    cs.schema = s.schema;
    cs.group = g;
    cs.timeout = s.timeout;
    auto resolved = cluster_internal::ResolveGroup(cs, *config);
    if (!resolved.ok()) return Usage(std::string(resolved.status().message()));
    o.groups.push_back(resolved->first);
  }
  ProgressLine progress(s.quiet || s.json);
  o.on_progress = [&progress](const backup::Progress& p) { progress.Show(p); };
  o.cancel = &g_cancel;
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  absl::StatusOr<backup::JobReport> r = backup::RunBackup(o);
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  if (!r.ok()) {
    if (absl::IsCancelled(r.status()))
      return Failed(StrCat("backup ", s.command, " cancelled; ", s.dir,
                           " keeps what finished, and the same command resumes the rest"));
    return Failed(StrCat("backup ", s.command, ": ", r.status().message()));
  }
  const double rate = r->seconds > 0 ? static_cast<double>(r->bytes) / r->seconds : 0;
  if (s.json) {
    std::string notes, problems;
    for (const std::string& n : r->notes)
      notes += StrCat(notes.empty() ? "" : ",", "\"", JsonEscape(n), "\"");
    for (const std::string& p : r->problems)
      problems += StrCat(problems.empty() ? "" : ",", "\"", JsonEscape(p), "\"");
    std::printf(
        "{\"job\":\"%s\",\"resumed\":%s,\"groups\":\"%llu\",\"files\":\"%llu\",\"bytes\":\"%llu\","
        "\"rows\":\"%llu\","
        "\"entries\":\"%llu\",\"seconds\":%.3f,\"notes\":[%s],\"problems\":[%s]}\n",
        r->job.c_str(), r->resumed ? "true" : "false", static_cast<unsigned long long>(r->groups),
        static_cast<unsigned long long>(r->files), static_cast<unsigned long long>(r->bytes),
        static_cast<unsigned long long>(r->rows), static_cast<unsigned long long>(r->entries),
        r->seconds, notes.c_str(), problems.c_str());
  } else {
    if (r->resumed) std::printf("finished an unfinished job first\n");
    for (const std::string& n : r->notes) std::printf("note: %s\n", n.c_str());
    for (const std::string& p : r->problems) std::printf("FAILED: %s\n", p.c_str());
    std::printf(
        "backup %s into %s from %s: %llu group(s), %llu rows, %llu log entries, %s in %s "
        "(%s/s), %zu problem(s)\n",
        s.command.c_str(), s.dir.c_str(), o.datacenter.c_str(),
        static_cast<unsigned long long>(r->groups), static_cast<unsigned long long>(r->rows),
        static_cast<unsigned long long>(r->entries), Megabytes(r->bytes).c_str(),
        Duration(r->seconds).c_str(), Megabytes(static_cast<uint64_t>(rate)).c_str(),
        r->problems.size());
  }
  return r->problems.empty() ? 0 : 1;
}

std::string Time(int64_t micros) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::FromUnixMicros(micros),
                          absl::UTCTimeZone());
}

int List(const BackupState& s) {
  absl::StatusOr<backup::Manifest> m = backup::LoadManifest(s.dir);
  if (!m.ok()) return Failed(StrCat("backup list: ", m.status().message()));
  if (s.json) {
    std::printf("%s\n", cluster_internal::Json(*m).c_str());
    return 0;
  }
  for (const backup::SchemaCopy& c : m->schemas())
    std::printf("schema %s (saved %s)\n", c.name().c_str(), Time(c.saved_micros()).c_str());
  // Per group, its files in position order.
  std::map<std::string, std::vector<const backup::FileEntry*>> groups;
  for (const backup::FileEntry& f : m->files())
    groups[StrCat(f.header().group().table(), " ", EscapeBytes(f.header().group().root(), 256))]
        .push_back(&f);
  uint64_t bytes = 0;
  for (auto& [name, files] : groups) {
    std::sort(files.begin(), files.end(),
              [](auto* a, auto* b) { return a->header().to() < b->header().to(); });
    std::printf("group %s\n", name.c_str());
    for (const backup::FileEntry* f : files) {
      const backup::FileHeader& h = f->header();
      bytes += f->bytes();
      if (h.kind() == backup::FULL) {
        std::printf("  full  at position %llu (%s), %llu rows, %s%s, from %s, taken %s\n",
                    static_cast<unsigned long long>(h.to()), Time(h.timestamp()).c_str(),
                    static_cast<unsigned long long>(f->footer().rows()),
                    Megabytes(f->bytes()).c_str(), h.sealed() ? ", sealed" : "",
                    h.datacenter().c_str(), Time(h.created_micros()).c_str());
      } else {
        std::printf("  log   positions %llu..%llu (to %s), %llu entries, %s%s, from %s, taken %s\n",
                    static_cast<unsigned long long>(h.from()),
                    static_cast<unsigned long long>(h.to()), Time(h.timestamp()).c_str(),
                    static_cast<unsigned long long>(f->footer().entries()),
                    Megabytes(f->bytes()).c_str(), h.sealed() ? ", sealed" : "",
                    h.datacenter().c_str(), Time(h.created_micros()).c_str());
      }
    }
  }
  for (const backup::Job& j : m->jobs()) {
    if (j.finished_micros() != 0) continue;
    std::printf(
        "unfinished job %s (%s of schema %s, started %s): %llu of %d groups done; the same "
        "command resumes it\n",
        j.id().c_str(), j.kind() == backup::FULL ? "backup create" : "backup log",
        j.schema().c_str(), Time(j.started_micros()).c_str(),
        static_cast<unsigned long long>(j.groups_done()), j.groups_size());
  }
  std::printf("%zu group(s), %d file(s), %s\n", groups.size(), m->files_size(),
              Megabytes(bytes).c_str());
  return 0;
}

int Verify(const BackupState& s) {
  backup::VerifyOptions o;
  o.dir = s.dir;
  o.timeout = absl::Seconds(s.timeout);
  rpc::RpcTransport transport;
  if (!s.config.empty()) {
    absl::StatusOr<server::ClusterConfig> config = server::LoadClusterConfigForClient(s.config);
    if (!config.ok()) return Usage(std::string(config.status().message()));
    absl::StatusOr<const server::DatacenterConfig*> source = SourceOf(s, *config);
    if (!source.ok()) return Usage(std::string(source.status().message()));
    o.transport = &transport;
    o.replication = server::AddressOf(**source, server::Role::kReplication);
    // Without --datacenter, each file opens where it was sealed.
    if (s.datacenter.empty()) {
      std::map<std::string, std::string> replication_of;
      for (const server::DatacenterConfig& dc : config->datacenters())
        replication_of[dc.name()] = server::AddressOf(dc, server::Role::kReplication);
      o.open = backup::OpenAtSource(&transport, replication_of, o.timeout);
    }
  }
  absl::StatusOr<backup::VerifyReport> r = backup::VerifyBackup(o);
  if (!r.ok()) return Failed(StrCat("backup verify: ", r.status().message()));
  backup::ReplayReport replay;
  if (s.replay) {
    absl::StatusOr<backup::ReplayReport> rr = backup::ReplayBackup(
        s.dir, o.open                   ? o.open
               : o.transport != nullptr ? backup::OpenAt(o.transport, o.replication, o.timeout)
                                        : backup::OpenChunk());
    if (!rr.ok()) return Failed(StrCat("backup verify --replay: ", rr.status().message()));
    replay = std::move(*rr);
    r->problems.insert(r->problems.end(), replay.problems.begin(), replay.problems.end());
  }
  if (s.json) {
    std::string problems, strays;
    for (const std::string& p : r->problems)
      problems += StrCat(problems.empty() ? "" : ",", "\"", JsonEscape(p), "\"");
    for (const std::string& p : r->strays)
      strays += StrCat(strays.empty() ? "" : ",", "\"", JsonEscape(p), "\"");
    std::printf(
        "{\"files\":\"%llu\",\"bytes\":\"%llu\",\"chunks\":\"%llu\",\"sealedOpened\":\"%llu\","
        "\"sealedUnchecked\":\"%llu\",\"replays\":\"%llu\",\"replayedEntries\":\"%llu\","
        "\"problems\":[%s],\"strays\":[%s],\"ok\":%s}\n",
        static_cast<unsigned long long>(r->files), static_cast<unsigned long long>(r->bytes),
        static_cast<unsigned long long>(r->chunks),
        static_cast<unsigned long long>(r->sealed_opened),
        static_cast<unsigned long long>(r->sealed_unchecked),
        static_cast<unsigned long long>(replay.replays),
        static_cast<unsigned long long>(replay.entries), problems.c_str(), strays.c_str(),
        r->problems.empty() ? "true" : "false");
  } else {
    for (const std::string& p : r->problems) std::printf("PROBLEM: %s\n", p.c_str());
    for (const std::string& p : r->strays)
      std::printf("stray file (not in the catalog; a crash left it): %s\n", p.c_str());
    std::printf("%llu file(s), %s, %llu chunk(s) read", static_cast<unsigned long long>(r->files),
                Megabytes(r->bytes).c_str(), static_cast<unsigned long long>(r->chunks));
    if (r->sealed_opened > 0)
      std::printf(", %llu sealed chunk(s) opened at the datacenter",
                  static_cast<unsigned long long>(r->sealed_opened));
    if (r->sealed_unchecked > 0)
      std::printf(", %llu sealed chunk(s) checked by checksum only (give --config to open them)",
                  static_cast<unsigned long long>(r->sealed_unchecked));
    if (s.replay)
      std::printf("; %llu replay(s) of %llu log entries between full backups compared",
                  static_cast<unsigned long long>(replay.replays),
                  static_cast<unsigned long long>(replay.entries));
    std::printf("; %zu problem(s)\n", r->problems.size());
  }
  return r->problems.empty() ? 0 : 1;
}

// --to-time: RFC 3339 ("2026-12-03T06:50:00Z") or microseconds since the
// epoch.
absl::StatusOr<int64_t> ParseTime(const std::string& text) {
  int64_t micros;
  if (absl::SimpleAtoi(text, &micros) && micros > 0) return micros;
  absl::Time t;
  std::string err;
  if (absl::ParseTime(absl::RFC3339_full, text, &t, &err)) return absl::ToUnixMicros(t);
  return absl::InvalidArgumentError(StrCat("--to-time '", text,
                                           "' is neither RFC 3339 (2026-12-03T06:50:00Z) nor "
                                           "microseconds since the epoch"));
}

int Restore(const BackupState& s) {
  absl::StatusOr<server::ClusterConfig> config = server::LoadClusterConfigForClient(s.config);
  if (!config.ok()) return Usage(std::string(config.status().message()));
  if (s.groups.empty() == !s.all) return Usage("restore: name the groups or give --all, not both");
  if (s.to_position > 0 && !s.to_time.empty())
    return Usage("give --to-position or --to-time, not both");
  if (!s.table.empty() && !s.all) return Usage("--table goes with --all");
  if (s.to_position > 0 && s.all)
    return Usage("--to-position names one group's position: give the group, not --all");
  backup::StateOptions point;
  point.dir = s.dir;
  if (s.to_position > 0) point.to_position = static_cast<uint64_t>(s.to_position);
  if (!s.to_time.empty()) {
    absl::StatusOr<int64_t> t = ParseTime(s.to_time);
    if (!t.ok()) return Usage(std::string(t.status().message()));
    point.to_time = *t;
  }
  for (absl::string_view p : absl::StrSplit(s.skip, ',', absl::SkipWhitespace())) {
    uint64_t pos;
    if (!absl::SimpleAtoi(p, &pos) || pos == 0)
      return Usage(StrCat("--skip: '", p, "' is not a log position"));
    point.skip.insert(pos);
  }
  if (!point.skip.empty() && (s.all || s.groups.size() != 1))
    return Usage("--skip names one group's positions: give exactly one group");
  absl::StatusOr<const server::DatacenterConfig*> source = SourceOf(s, *config);
  if (!source.ok()) return Usage(std::string(source.status().message()));

  // The schema as the backup recorded it.
  absl::StatusOr<backup::Manifest> m = backup::LoadManifest(s.dir);
  if (!m.ok()) return Failed(StrCat("restore: ", m.status().message()));
  schema::SchemaDescriptor schema;
  for (const backup::SchemaCopy& c : m->schemas())
    if (c.name() == s.schema && !schema.ParseFromString(c.schema_descriptor()))
      return Failed(StrCat("restore: the backup's copy of schema ", s.schema, " does not parse"));
  if (schema.name().empty())
    return Usage(StrCat("the backup in ", s.dir, " holds no schema ", s.schema));
  std::vector<cluster_internal::NamedGroup> groups;
  for (const std::string& g : s.groups) {
    absl::StatusOr<cluster_internal::NamedGroup> named = cluster_internal::ParseGroup(schema, g);
    if (!named.ok()) return Usage(std::string(named.status().message()));
    groups.push_back(std::move(*named));
  }
  if (s.all) {
    // Every group of the schema the backup holds.
    absl::StatusOr<schema::Layout> layout = schema::Layout::Create(schema);
    if (!layout.ok()) return Failed(std::string(layout.status().message()));
    std::set<std::string> seen;
    for (const backup::FileEntry& f : m->files()) {
      if (f.header().schema() != s.schema || !seen.insert(f.header().group().root()).second)
        continue;
      cluster_internal::NamedGroup g;
      g.group = f.header().group();
      // The root table whose rows the group's root key belongs to.
      for (const schema::TableDescriptor& t : schema.tables()) {
        if (!t.entity_group_root()) continue;
        absl::StatusOr<std::vector<schema::KeyColumn>> columns = schema::PrimaryKeyColumns(t);
        if (!columns.ok()) continue;
        absl::StatusOr<std::vector<schema::KeyValue>> key =
            schema::DecodeKey(*columns, f.header().group().root());
        if (!key.ok()) continue;
        absl::StatusOr<std::string> row = layout->GroupRow(t, *key);
        if (!row.ok() || *row != f.header().group().root()) continue;
        g.root_table = t.name();
        g.root_key = std::move(*key);
        break;
      }
      if (g.root_table.empty())
        return Failed(StrCat("restore: the backup's group ", EscapeBytes(g.group.root()),
                             " is no root entity of schema ", s.schema));
      if (!s.table.empty() && g.root_table != s.table) continue;
      groups.push_back(std::move(g));
    }
  }

  DatabaseOptions d;
  d.replicas = server::ReplicasOf(*config);
  d.local = (*source)->name();
  d.schema = schema;
  d.replication.deadline = absl::Seconds(s.timeout);
  d.queue_sweep_interval = absl::ZeroDuration();
  absl::StatusOr<std::unique_ptr<Database>> db = Database::Open(d);
  if (!db.ok()) return Usage(std::string(db.status().message()));
  rpc::RpcTransport transport;
  // Sealed backups open at the datacenter that sealed them.
  std::map<std::string, std::string> replication_of;
  for (const server::DatacenterConfig& dc : config->datacenters())
    replication_of[dc.name()] = server::AddressOf(dc, server::Role::kReplication);

  int failed = 0;
  std::string json;
  for (const cluster_internal::NamedGroup& g : groups) {
    backup::RestoreOptions o;
    o.state = point;
    o.state.group = g.group;
    o.state.open = backup::OpenAtSource(&transport, replication_of, absl::Seconds(s.timeout));
    o.root_table = g.root_table;
    o.root_key = g.root_key;
    o.db = db->get();
    o.force = s.force;
    o.batch = s.batch;
    o.dry_run = s.dry_run;
    absl::StatusOr<backup::RestoreReport> r = backup::RestoreGroup(o);
    const std::string name = StrCat(g.root_table, " ", EscapeBytes(g.group.root(), 256));
    if (!r.ok()) {
      ++failed;
      if (s.json) {
        json += StrCat(json.empty() ? "" : ",", "{\"group\":\"", JsonEscape(name),
                       "\",\"error\":\"", JsonEscape(r.status().ToString()), "\"}");
      } else {
        std::printf("FAILED: %s: %s\n", name.c_str(), r.status().ToString().c_str());
      }
      continue;
    }
    const backup::GroupState& st = r->state;
    if (s.json) {
      json +=
          StrCat(json.empty() ? "" : ",", "{\"group\":\"", JsonEscape(name), "\",\"position\":\"",
                 st.position, "\",\"timestamp\":\"", st.timestamp, "\",\"base\":\"", st.base,
                 "\",\"replayed\":\"", st.replayed, "\",\"skipped\":\"", st.skipped,
                 "\",\"liveBefore\":\"", r->live_before, "\",\"puts\":\"", r->puts,
                 "\",\"deletes\":\"", r->deletes, "\",\"unchanged\":\"", r->unchanged,
                 "\",\"commits\":\"", r->commits, "\",\"lastCommit\":\"", r->last_commit,
                 "\",\"dryRun\":", s.dry_run ? "true" : "false", "}");
    } else {
      std::printf(
          "%s: %s position %llu (%s; full backup at %llu + %llu entries, %llu left out): %llu "
          "put, %llu deleted, %llu unchanged%s\n",
          name.c_str(), s.dry_run ? "would restore to" : "restored to",
          static_cast<unsigned long long>(st.position), Time(st.timestamp).c_str(),
          static_cast<unsigned long long>(st.base), static_cast<unsigned long long>(st.replayed),
          static_cast<unsigned long long>(st.skipped), static_cast<unsigned long long>(r->puts),
          static_cast<unsigned long long>(r->deletes),
          static_cast<unsigned long long>(r->unchanged),
          r->commits > 0
              ? StrCat(" in ", r->commits, " commit(s), the last at position ", r->last_commit)
                    .c_str()
              : "");
    }
  }
  if (s.json) std::printf("[%s]\n", json.c_str());
  return failed == 0 ? 0 : 1;
}

// "30d", "12h", "90m", "3600s": a retention window.
absl::StatusOr<absl::Duration> ParseWindow(const std::string& text) {
  int64_t n = 0;
  const char unit = text.empty() ? '\0' : text.back();
  const std::map<char, absl::Duration> units = {{'s', absl::Seconds(1)},
                                                {'m', absl::Minutes(1)},
                                                {'h', absl::Hours(1)},
                                                {'d', absl::Hours(24)}};
  auto it = units.find(unit);
  if (it == units.end() || !absl::SimpleAtoi(text.substr(0, text.size() - 1), &n) || n <= 0 ||
      n > 100000)
    return absl::InvalidArgumentError(
        StrCat("--keep '", text, "' is not a window like 30d, 12h, 90m or 3600s"));
  return n * it->second;
}

int Prune(const BackupState& s) {
  absl::StatusOr<absl::Duration> window = ParseWindow(s.keep);
  if (!window.ok()) return Usage(std::string(window.status().message()));
  const int64_t horizon = absl::ToUnixMicros(absl::Now() - *window);
  absl::StatusOr<backup::PruneReport> r = backup::PruneBackup(s.dir, horizon, s.dry_run);
  if (!r.ok()) return Failed(StrCat("backup prune: ", r.status().message()));
  if (s.json) {
    std::printf(
        "{\"deleted\":\"%llu\",\"bytes\":\"%llu\",\"kept\":\"%llu\",\"jobs\":\"%llu\",\"horizon\":"
        "\"%s\","
        "\"dryRun\":%s}\n",
        static_cast<unsigned long long>(r->files), static_cast<unsigned long long>(r->bytes),
        static_cast<unsigned long long>(r->kept), static_cast<unsigned long long>(r->jobs),
        Time(horizon).c_str(), s.dry_run ? "true" : "false");
  } else {
    std::printf("%s %llu file(s), %s, not needed to restore to %s or later; %llu kept\n",
                s.dry_run ? "would delete" : "deleted", static_cast<unsigned long long>(r->files),
                Megabytes(r->bytes).c_str(), Time(horizon).c_str(),
                static_cast<unsigned long long>(r->kept));
  }
  return 0;
}

}  // namespace

void AddBackupCommands(CLI::App& app, BackupState& state) {
  CLI::App* b = app.add_subcommand(
      "backup", "Backups of entity groups: full snapshots and their log, listed and verified");
  b->require_subcommand(1);
  for (const char* verb : {"create", "log"}) {
    const bool full = std::string(verb) == "create";
    CLI::App* v = b->add_subcommand(
        verb, full ? "A full snapshot of each group at one log position, read from one "
                     "datacenter while writes go on"
                   : "The log entries each group chose since its last backup (a group with "
                     "no backup yet gets a full one)");
    AddConfigOption(v, state.config,
                    "the cluster config (megastored --local writes DATA/cluster.textproto)",
                    /*required=*/true);
    v->add_option("--to", state.dir, "the backup directory (created if missing)")->required();
    v->add_option("schema", state.schema,
                  "an applied schema's name, or a NAME.schema.pb/.msdl file")
        ->required();
    v->add_option("groups", state.groups, "entity groups as ROOT_TABLE:KEY[,KEY...], e.g. User:7");
    v->add_flag("--all", state.all,
                full ? "every entity group of the schema"
                     : "every group the backup holds, and a full backup of each new group");
    v->add_option("--datacenter", state.datacenter,
                  "the datacenter to read from (default: the config's first full replica)");
    v->add_option("--timeout", state.timeout, "seconds each request may take")
        ->check(CLI::Range(0.001, 86400.0))
        ->capture_default_str();
    AddOutputOption(v, state.json, "print one JSON object at the end, no progress");
    v->add_flag("--quiet", state.quiet, "no progress on stderr");
    v->callback([&state, verb] { state.command = verb; });
  }
  CLI::App* list = b->add_subcommand("list", "What a backup directory holds, group by group");
  list->add_option("--from", state.dir, "the backup directory")->required();
  AddOutputOption(list, state.json, "the catalog as JSON");
  list->callback([&state] { state.command = "list"; });
  CLI::App* verify = b->add_subcommand(
      "verify",
      "Read every file end to end and check every checksum, the catalog and each group's chain");
  verify->add_option("--from", state.dir, "the backup directory")->required();
  verify->add_option("--config", state.config,
                     "also open sealed (encrypted) chunks at a datacenter of this cluster");
  verify->add_option("--datacenter", state.datacenter,
                     "with --config: the datacenter whose keys sealed them (default: the first "
                     "full replica)");
  verify->add_option("--timeout", state.timeout, "seconds each request may take")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  verify->add_flag("--replay", state.replay,
                   "also replay each group's log between consecutive full backups in memory and "
                   "compare the result with the later full backup");
  AddOutputOption(verify, state.json, "print one JSON object");
  verify->callback([&state] { state.command = "verify"; });
  CLI::App* prune = b->add_subcommand(
      "prune",
      "Retention: delete the files no restore to a time inside the window needs (and with them "
      "deleted entities' old data)");
  prune->add_option("--from", state.dir, "the backup directory")->required();
  prune->add_option("--keep", state.keep, "the window to keep restorable: 30d, 12h, 90m, 3600s")
      ->required();
  prune->add_flag("--dry-run", state.dry_run, "say what would be deleted, delete nothing");
  AddOutputOption(prune, state.json, "print one JSON object");
  prune->callback([&state] { state.command = "prune"; });

  CLI::App* restore = app.add_subcommand(
      "restore",
      "Bring entity groups back to a point in their backup (leaving out chosen log entries), as "
      "new commits every replica applies");
  // Always given on the command line: a restore writes, and an rc file's
  // default cluster is not necessarily the one meant.
  restore
      ->add_option("--config", state.config,
                   "the cluster to restore into (the backed-up one, or a new one with the schema "
                   "applied); never taken from MEGASTORE_CONFIG or the rc file")
      ->required();
  restore->add_option("--from", state.dir, "the backup directory")->required();
  restore->add_option("schema", state.schema, "the schema's name in the backup")->required();
  restore->add_option("groups", state.groups, "entity groups as ROOT_TABLE:KEY[,KEY...]");
  restore->add_flag("--all", state.all, "every group of the schema the backup holds");
  restore->add_option("--table", state.table, "with --all: only the groups of this root table");
  restore
      ->add_option("--to-position", state.to_position,
                   "the group's log position to restore to (default: the latest backed up)")
      ->check(CLI::Range(int64_t{1}, INT64_MAX));
  restore->add_option("--to-time", state.to_time,
                      "restore to the last commit at or before this time: RFC 3339 "
                      "(2026-12-03T06:50:00Z) or microseconds since the epoch");
  restore->add_option("--skip", state.skip,
                      "log positions to leave out, comma-separated (e.g. an accidental delete)");
  restore->add_flag("--force", state.force,
                    "go on when someone else writes the group meanwhile (default: stop)");
  restore->add_flag("--dry-run", state.dry_run, "say what would change, write nothing");
  restore->add_option("--batch", state.batch, "entity writes per commit")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  restore->add_option("--datacenter", state.datacenter,
                      "the datacenter to write through and to open sealed backups at (default: "
                      "the config's first full replica)");
  restore->add_option("--timeout", state.timeout, "seconds each request may take")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  AddOutputOption(restore, state.json, "print a JSON array, one object per group");
  restore->callback([&state] { state.command = "restore"; });
}

int RunBackupCommand(const BackupState& s) {
  if (s.command == "restore") return Restore(s);
  if (s.command == "create" || s.command == "log") return Take(s);
  if (s.command == "list") return List(s);
  if (s.command == "verify") return Verify(s);
  if (s.command == "prune") return Prune(s);
  return Usage(StrCat("unknown backup command ", s.command));
}

}  // namespace megastore::tools
