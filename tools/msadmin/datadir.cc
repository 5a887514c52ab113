#include "tools/msadmin/datadir.h"

#include <cstdio>
#include <ctime>
#include <filesystem>

#include "base/cli.h"
#include "base/coding.h"
#include "base/file.h"
#include "base/strings.h"
#include "storage/tabletserver/tablet_server.h"

namespace megastore::tools {

namespace fs = std::filesystem;

void AddDatadirCommand(CLI::App& app, DatadirState& state) {
  CLI::App* datadir =
      app.add_subcommand("datadir", "Offline repairs of a tablet server's data directory");
  datadir->require_subcommand(1);
  CLI::App* rebuild =
      datadir->add_subcommand("rebuild-state",
                              "Rebuild a lost or damaged DATA/state.pb (the tables and tablets a "
                              "standalone tablet server serves) from "
                              "the tables' schemas and the tablets' own metadata. Stop the server "
                              "first. Without --yes, only shows what "
                              "it would write");
  rebuild->add_option("--data", state.data, "the tablet server's data directory")->required();
  rebuild->add_flag("--yes", state.yes,
                    "write it: a damaged state.pb is kept as "
                    "state.pb.damaged-SECONDS, the new one takes its place");
  AddOutputOption(rebuild, state.json,
                  "one object: file, was, tables (name, tablets: id, start, end), notes, "
                  "written, keptDamagedAs");
  rebuild->callback([&state] { state.verb = "rebuild-state"; });
}

namespace {

std::string RangeText(const storage::TabletEntry& e) {
  return StrCat(
      "[", e.start_row().empty() ? "start" : StrCat("\"", EscapeBytes(e.start_row()), "\""), ", ",
      e.end_row().empty() ? "end" : StrCat("\"", EscapeBytes(e.end_row()), "\""), ")");
}

int RebuildState(const DatadirState& s) {
  const std::string path = (fs::path(s.data) / "state.pb").string();
  absl::StatusOr<std::string> current = ReadChecksummedFile(path);
  if (current.ok()) {
    storage::TabletServerState state;
    if (state.ParseFromString(*current)) {
      std::fprintf(stderr,
                   "msadmin datadir rebuild-state: %s is intact (%d tables, %d "
                   "tablets); nothing to rebuild. "
                   "(To rebuild anyway, move it aside first.)\n",
                   path.c_str(), state.tables_size(), state.tablets_size());
      return 1;
    }
  }
  absl::StatusOr<storage::RebuiltState> rebuilt = storage::RebuildStateFromTablets(s.data);
  if (!rebuilt.ok()) {
    std::fprintf(stderr, "msadmin datadir rebuild-state: %s\n",
                 std::string(rebuilt.status().message()).c_str());
    return 1;
  }
  const std::string was =
      absl::IsNotFound(current.status()) ? "missing" : std::string(current.status().message());
  // -o json: the same facts as one object, printed once it is all done.
  auto json = [&](bool written, const std::string& kept_as) {
    std::string tables;
    for (const storage::TableSchema& t : rebuilt->state.tables()) {
      std::string tablets;
      for (const storage::TabletEntry& e : rebuilt->state.tablets()) {
        if (e.table() != t.name()) continue;
        tablets += StrCat(tablets.empty() ? "" : ",", "{\"id\":\"", JsonEscape(e.id()),
                          "\",\"start\":\"", JsonEscape(EscapeBytes(e.start_row(), 1 << 20)),
                          "\",\"end\":\"", JsonEscape(EscapeBytes(e.end_row(), 1 << 20)), "\"}");
      }
      tables += StrCat(tables.empty() ? "" : ",", "{\"name\":\"", JsonEscape(t.name()),
                       "\",\"tablets\":[", tablets, "]}");
    }
    std::string notes;
    for (const std::string& note : rebuilt->notes)
      notes += StrCat(notes.empty() ? "" : ",", "\"", JsonEscape(note), "\"");
    std::printf(
        "{\"file\":\"%s\",\"was\":\"%s\",\"tables\":[%s],\"notes\":[%s],\"written\":%s,"
        "\"keptDamagedAs\":%s}\n",
        JsonEscape(path).c_str(), JsonEscape(was).c_str(), tables.c_str(), notes.c_str(),
        written ? "true" : "false",
        kept_as.empty() ? "null" : StrCat("\"", JsonEscape(kept_as), "\"").c_str());
    return 0;
  };
  if (!s.json) {
    std::printf("%s: %s\n", path.c_str(), was.c_str());
    std::printf("rebuilt from the tablets: %d tables, %d tablets\n", rebuilt->state.tables_size(),
                rebuilt->state.tablets_size());
    for (const storage::TableSchema& t : rebuilt->state.tables()) {
      std::printf("  table %s\n", t.name().c_str());
      for (const storage::TabletEntry& e : rebuilt->state.tablets()) {
        if (e.table() == t.name())
          std::printf("    tablet %s rows %s\n", e.id().c_str(), RangeText(e).c_str());
      }
    }
    for (const std::string& note : rebuilt->notes) std::printf("  note: %s\n", note.c_str());
  }
  if (!s.yes) {
    if (s.json) return json(false, "");
    std::printf("nothing written; run again with --yes to write it\n");
    return 0;
  }
  std::error_code ec;
  std::string aside;
  if (fs::exists(path, ec)) {
    aside = StrCat(path, ".damaged-", static_cast<long long>(std::time(nullptr)));
    fs::rename(path, aside, ec);
    if (ec) {
      std::fprintf(stderr, "msadmin datadir rebuild-state: cannot move %s aside: %s\n",
                   path.c_str(), ec.message().c_str());
      return 1;
    }
    if (!s.json) std::printf("kept the damaged file as %s\n", aside.c_str());
  }
  if (absl::Status w = WriteChecksummedFile(path, rebuilt->state.SerializeAsString()); !w.ok()) {
    std::fprintf(stderr, "msadmin datadir rebuild-state: %s\n", std::string(w.message()).c_str());
    return 1;
  }
  if (s.json) return json(true, aside);
  std::printf(
      "wrote %s; start the server: it replays the commit log into every "
      "tablet\n",
      path.c_str());
  return 0;
}

}  // namespace

int RunDatadir(const DatadirState& s) {
  if (s.verb == "rebuild-state") return RebuildState(s);
  return 2;
}

}  // namespace megastore::tools
