// The master's placement work (docs/cell.md): balancing tablets across
// servers, merging small neighbours, moving a tablet, and collecting the
// files nothing references any more.
#include <algorithm>
#include <filesystem>

#include "base/await.h"
#include "base/file.h"
#include "base/logging.h"
#include "base/status.h"
#include "base/strings.h"
#include "storage/cell/master.h"
#include "storage/tabletserver/tablet_server.h"

namespace megastore::storage::cell {

namespace fs = std::filesystem;

void Master::Balance(const std::vector<TabletRecord>& records,
                     const std::map<std::string, TableSchema>& schemas,
                     const std::set<std::string>& keep) {
  if (options_.balance_margin <= 0) return;
  std::string most, least;
  size_t most_n = 0, least_n = SIZE_MAX;
  for (const auto& [s, p] : probes_) {
    if (!p.reachable || p.log.empty()) continue;
    if (p.serving.size() >= most_n) {
      most = s;
      most_n = p.serving.size();
    }
    if (p.serving.size() < least_n) {
      least = s;
      least_n = p.serving.size();
    }
  }
  if (most.empty() || least.empty() || most == least ||
      most_n <= least_n + static_cast<size_t>(options_.balance_margin)) {
    return;
  }
  for (const TabletRecord& r : records) {
    if (r.location.server != most || !probes_[most].serving.contains(r.location.tablet_id))
      continue;
    if (keep.contains(r.location.tablet_id)) continue;
    if (absl::Status s = Move(r, least, schemas); !s.ok()) {
      Event(StrCat("balancing: moving ", r.location.tablet_id, " to ", least, ": ", s.message()));
    }
    return;  // one move per pass
  }
}

std::set<std::string> Master::MergeSmall(const std::vector<TabletRecord>& records,
                                         const std::map<std::string, TableSchema>& schemas) {
  std::set<std::string> pairs;
  if (options_.merge_threshold_bytes == 0) return pairs;
  const int64_t now = env_->MonotonicMicros();
  auto size_of = [&](const TabletRecord& r) -> std::optional<uint64_t> {
    auto p = probes_.find(r.location.server);
    if (p == probes_.end() || !p->second.reachable) return std::nullopt;
    auto it = p->second.serving.find(r.location.tablet_id);
    if (it == p->second.serving.end() || it->second >= kUnknownSize) return std::nullopt;
    auto seen = first_seen_.find(r.location.tablet_id);
    if (seen == first_seen_.end() ||
        now - seen->second < absl::ToInt64Microseconds(options_.merge_after)) {
      return std::nullopt;
    }
    return it->second;
  };
  const TabletRecord* first_a = nullptr;
  const TabletRecord* first_b = nullptr;
  uint64_t first_size = 0;
  for (size_t i = 1; i < records.size(); ++i) {
    const TabletRecord& a = records[i - 1];
    const TabletRecord& b = records[i];
    if (a.location.table != b.location.table || a.location.end_row != b.location.start_row)
      continue;
    if (!a.split_left.empty() || !b.split_left.empty()) continue;
    const std::optional<uint64_t> sa = size_of(a), sb = size_of(b);
    if (!sa || !sb || *sa + *sb >= options_.merge_threshold_bytes) continue;
    pairs.insert(a.location.tablet_id);
    pairs.insert(b.location.tablet_id);
    if (first_a == nullptr) {
      first_a = &a;
      first_b = &b;
      first_size = *sa + *sb;
    }
  }
  if (first_a == nullptr) return pairs;
  const TabletRecord& a = *first_a;
  const TabletRecord& b = *first_b;
  if (a.location.server != b.location.server) {
    // Neighbours on one server first; the merge follows in a later pass.
    if (absl::Status s = Move(b, a.location.server, schemas); !s.ok()) {
      Event(StrCat("merging: moving ", b.location.tablet_id, " to ", a.location.server, ": ",
                   s.message()));
    }
    return pairs;
  }
  auto merged =
      client_.Server(a.location.server)->MergeTablets(a.location.tablet_id, b.location.tablet_id);
  if (!merged.ok()) {
    Event(StrCat("merging ", a.location.tablet_id, " and ", b.location.tablet_id, ": ",
                 merged.status().message()));
    return pairs;
  }
  Probe& p = probes_[a.location.server];
  p.serving.erase(a.location.tablet_id);
  p.serving.erase(b.location.tablet_id);
  p.serving[merged->id()] = kUnknownSize;
  Event(StrCat("merged ", a.location.tablet_id, " and ", b.location.tablet_id, " (", first_size,
               " bytes) into ", merged->id(), " on ", a.location.server));
  return pairs;  // one merge per pass
}

absl::Status Master::Move(TabletRecord record, const std::string& to,
                          const std::map<std::string, TableSchema>& schemas) {
  auto dest = probes_.find(to);
  if (dest == probes_.end() || !dest->second.reachable || dest->second.log.empty()) {
    return absl::FailedPreconditionError(
        StrCat(to, " is not a live tablet server of cell ", options_.cell));
  }
  auto schema = schemas.find(record.location.table);
  if (schema == schemas.end())
    return absl::NotFoundError(StrCat("no schema for table ", record.location.table));
  const std::string from = record.location.server;
  if (from == to) return absl::OkStatus();
  if (!from.empty() && !record.log.empty()) {
    // The server at `from` must be the incarnation METADATA recorded: a
    // restarted one answers the unload with NotFound, while the tablet's
    // unflushed writes are in the dead incarnation's log, which only the
    // recovery of the next pass replays.
    auto source = probes_.find(from);
    if (source == probes_.end() || source->second.log != record.log) {
      return absl::FailedPreconditionError(
          StrCat("tablet ", record.location.tablet_id, " was served by an earlier incarnation of ",
                 from, " (log ", record.log, "); it is recovered from that log, not moved"));
    }
  }
  // Unload first (it flushes: the new server needs nothing of the old
  // log), then record, then load.
  if (!from.empty()) {
    // Naming the incarnation: one restarted since the probe refuses
    // instead of answering "not loaded".
    absl::Status s = client_.Server(from)->UnloadTablet(record.location.tablet_id, record.log);
    if (!s.ok() && !absl::IsNotFound(s)) return s;
    probes_[from].serving.erase(record.location.tablet_id);
  }
  TabletRecord next = record;
  next.location.server = to;
  next.log = dest->second.log;
  MS_RETURN_IF_ERROR(
      WriteRecord(next, record.location.tablet_id, StrCat("moved from ", from, " to ", to)));
  MS_RETURN_IF_ERROR(Assign(to, next, schema->second));
  dest->second.serving[record.location.tablet_id] = kUnknownSize;
  Event(StrCat("tablet ", record.location.tablet_id, " moved from ", from, " to ", to));
  return absl::OkStatus();
}

void Master::CollectGarbage(const std::vector<TabletRecord>& records) {
  std::set<std::string> referenced, logs;
  for (const TabletRecord& r : records) {
    referenced.insert(r.location.tablet_id);
    if (!r.split_left.empty()) referenced.insert(r.split_left);
    if (!r.log.empty()) logs.insert(r.log);
  }
  // Asked again now, not at the pass's start: what every live server
  // serves and what a split or merge is creating there. A directory created
  // after this is younger than the grace period. A server that does not
  // answer: no collection this time.
  for (auto& [address, p] : probes_) {
    std::string log;
    std::vector<std::string> creating;
    absl::StatusOr<std::vector<TabletClient::TabletInfo>> listed =
        probe_clients_[address] ? probe_clients_[address]->ListTablets("", &log, &creating)
                                : absl::UnavailableError("not probed");
    if (!listed.ok()) return;
    for (const auto& t : *listed) referenced.insert(t.entry.id());
    referenced.insert(creating.begin(), creating.end());
    for (const auto& [id, size] : p.serving) referenced.insert(id);
    if (!log.empty()) logs.insert(log);
  }
  const auto grace = std::chrono::seconds(absl::ToInt64Seconds(options_.gc_grace));
  const auto now = fs::file_time_type::clock::now();
  auto sweep = [&](const fs::path& dir, const std::set<std::string>& keep, const char* what) {
    std::error_code ec;
    if (!fs::exists(dir, ec)) return;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (keep.contains(name)) continue;
      std::error_code tec;
      const auto mtime = fs::last_write_time(e.path(), tec);
      if (tec || now - mtime < grace) continue;
      std::error_code rec;
      fs::remove_all(e.path(), rec);
      Event(StrCat("garbage collection: deleted ", what, " ", name));
    }
  };
  sweep(fs::path(options_.data_root) / "tablets", referenced, "tablet directory");
  sweep(fs::path(options_.data_root) / "recovered", referenced, "log pieces of tablet");
  sweep(fs::path(options_.data_root) / "logs", logs, "commit log");
}

}  // namespace megastore::storage::cell
