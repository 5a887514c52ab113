#include "tools/msadmin/cell.h"

#include <cstdio>

#include "base/await.h"
#include "base/cli.h"
#include "base/coding.h"
#include "base/strings.h"
#include "storage/cell/cell_client.h"
#include "storage/cell/connect.h"
#include "storage/cell/master.h"
#include "storage/cell/membership.h"

namespace megastore::tools {

void AddCellCommand(CLI::App& app, CellState& state) {
  CLI::App* cell = app.add_subcommand("cell", "A Bigtable cell, as its lock service sees it");
  cell->require_subcommand(1);
  CLI::App* status = cell->add_subcommand("status", "The master and the registered tablet servers");
  status
      ->add_option(
          "--lock-service", state.lock_service,
          "HOST:PORT of a megastored running the lock role, or etcd:HOST:PORT[,HOST:PORT...]")
      ->required();
  status->add_option("--cell", state.cell, "the cell's name")->required();
  AddOutputOption(status, state.json, "one JSON object");
}

int RunCell(const CellState& s) {
  auto service = storage::cell::ConnectLockService(s.lock_service);
  if (!service.ok()) {
    std::fprintf(stderr, "msadmin cell: %s\n", std::string(service.status().message()).c_str());
    return 2;
  }
  auto master = Await<std::optional<storage::lock::FileInfo>>(
      [&](auto cb) { (*service)->Get(storage::cell::MasterLock(s.cell), std::move(cb)); });
  auto servers = Await<storage::lock::Listing>(
      [&](auto cb) { (*service)->List(storage::cell::ServersDir(s.cell), std::move(cb)); });
  if (!master.ok() || !servers.ok()) {
    std::fprintf(stderr, "msadmin cell status: cannot read the lock service %s: %s\n",
                 s.lock_service.c_str(),
                 std::string((master.ok() ? servers.status() : master.status()).message()).c_str());
    return 1;
  }
  const std::string dir = storage::cell::ServersDir(s.cell);
  if (s.json) {
    std::string list;
    for (const auto& f : servers->files)
      list += StrCat(list.empty() ? "" : ",", "\"", JsonEscape(f.path.substr(dir.size())), "\"");
    std::printf(
        "{\"cell\":\"%s\",\"master\":%s,\"tabletServers\":[%s]}\n", JsonEscape(s.cell).c_str(),
        master->has_value() ? StrCat("\"", JsonEscape((*master)->contents), "\"").c_str() : "null",
        list.c_str());
    return 0;
  }
  std::printf("cell %s\n  master: %s\n  tablet servers: %zu\n", s.cell.c_str(),
              master->has_value() ? (*master)->contents.c_str() : "none (no master holds the lock)",
              servers->files.size());
  // The master's view, when one answers: tablets per server, recent events.
  std::map<std::string, std::string> per_server;
  std::vector<std::string> events;
  if (master->has_value()) {
    auto state = storage::cell::MasterClient((*master)->contents, absl::Seconds(s.timeout)).State();
    if (state.ok()) {
      for (const auto& srv : state->servers())
        per_server[srv.address()] =
            StrCat(srv.tablets(), " tablets", srv.reachable() ? "" : ", UNREACHABLE");
      events.assign(state->events().begin(), state->events().end());
    } else {
      std::printf("  (the master did not answer: %s)\n",
                  std::string(state.status().message()).c_str());
    }
  }
  for (const auto& f : servers->files) {
    const std::string address = f.path.substr(dir.size());
    auto it = per_server.find(address);
    std::printf("    %s (session %lld%s)\n", address.c_str(), static_cast<long long>(f.session),
                it == per_server.end() ? "" : StrCat(", ", it->second).c_str());
  }
  if (!events.empty()) {
    std::printf("  recent master events:\n");
    const size_t from = events.size() > 10 ? events.size() - 10 : 0;
    for (size_t i = from; i < events.size(); ++i) std::printf("    %s\n", events[i].c_str());
  }
  return 0;
}

void AddTabletCommand(CLI::App& app, CellState& state) {
  CLI::App* tablet =
      app.add_subcommand("tablet", "A Bigtable cell's tablets: list, split, move (docs/cell.md)");
  tablet->require_subcommand(1);
  auto common = [&](CLI::App* sub) {
    sub->add_option(
           "--lock-service", state.lock_service,
           "HOST:PORT of a megastored running the lock role, or etcd:HOST:PORT[,HOST:PORT...]")
        ->required();
    sub->add_option("--cell", state.cell, "the cell's name")->required();
    sub->add_option("--timeout", state.timeout, "seconds to wait for each call")
        ->check(CLI::Range(0.001, 86400.0))
        ->capture_default_str();
  };
  CLI::App* ls =
      tablet->add_subcommand("ls", "Every tablet (METADATA's too) with its rows, server and size");
  common(ls);
  ls->add_option("--table", state.table, "only this table's tablets");
  AddOutputOption(ls, state.json, "one JSON object per line");
  ls->callback([&state] { state.verb = "ls"; });
  CLI::App* split =
      tablet->add_subcommand("split", "Split a tablet (at ROW, or at its middle row)");
  common(split);
  split->add_option("tablet", state.tablet_id, "the tablet id (msadmin tablet ls)")->required();
  split->add_option("row", state.row, "the first row of the right half (default: the middle row)");
  AddOutputOption(split, state.json, "one object per child tablet: tablet, start, end");
  split->callback([&state] { state.verb = "split"; });
  CLI::App* move =
      tablet->add_subcommand("move", "Move a tablet to another tablet server of the cell");
  common(move);
  move->add_option("tablet", state.tablet_id, "the tablet id (msadmin tablet ls)")->required();
  move->add_option("server", state.server, "HOST:PORT of a live tablet server of the cell")
      ->required();
  AddOutputOption(move, state.json, "{\"tablet\", \"server\"}");
  move->callback([&state] { state.verb = "move"; });
}

int RunTablet(const CellState& s) {
  auto service = storage::cell::ConnectLockService(s.lock_service);
  if (!service.ok()) {
    std::fprintf(stderr, "msadmin tablet: %s\n", std::string(service.status().message()).c_str());
    return 2;
  }
  const absl::Duration timeout = absl::Seconds(s.timeout);
  auto fail = [&](const absl::Status& st) {
    std::fprintf(stderr, "msadmin tablet %s: %s\n", s.verb.c_str(),
                 std::string(st.message()).c_str());
    return 1;
  };
  if (s.verb == "ls") {
    storage::cell::CellClientOptions o;
    o.cell = s.cell;
    o.retry_for = timeout;
    storage::cell::CellClient client(service->get(), Env::Default(), o);
    auto tablets = client.Tablets(s.table);
    if (!tablets.ok()) return fail(tablets.status());
    // Sizes and "serving" from the master, if one answers.
    std::map<std::string, storage::cell::TabletState> live;
    if (auto m = storage::cell::FindMaster(service->get(), s.cell); m.ok()) {
      if (auto state = storage::cell::MasterClient(*m, timeout).State(); state.ok()) {
        for (const auto& t : state->tablets()) live[t.id()] = t;
      }
    }
    if (!s.json)
      std::printf("%-10s %-28s %-18s %-18s %-22s %s\n", "TABLE", "TABLET", "START", "END", "SERVER",
                  "BYTES");
    for (const auto& t : *tablets) {
      const auto& l = t.location;
      if (!s.table.empty() && l.table != s.table) continue;
      auto it = live.find(l.tablet_id);
      const std::string bytes = it == live.end() ? "?" : std::to_string(it->second.size_bytes());
      const bool serving = it != live.end() && it->second.serving();
      if (s.json) {
        std::printf(
            "{\"table\":\"%s\",\"tablet\":\"%s\",\"start\":\"%s\",\"end\":\"%s\",\"server\":\"%s\","
            "\"serving\":%s,\"bytes\":%s}\n",
            JsonEscape(l.table).c_str(), JsonEscape(l.tablet_id).c_str(),
            JsonEscape(EscapeBytes(l.start_row, 1 << 20)).c_str(),
            JsonEscape(EscapeBytes(l.end_row, 1 << 20)).c_str(), JsonEscape(l.server).c_str(),
            serving ? "true" : "false",
            it == live.end() ? "null" : StrCat("\"", bytes, "\"").c_str());
      } else {
        std::printf("%-10s %-28s %-18s %-18s %-22s %s\n", l.table.c_str(), l.tablet_id.c_str(),
                    EscapeBytes(l.start_row, 16).c_str(),
                    l.end_row.empty() ? "(end)" : EscapeBytes(l.end_row, 16).c_str(),
                    l.server.empty() ? "(unassigned)" : l.server.c_str(), bytes.c_str());
      }
    }
    return 0;
  }
  auto master = storage::cell::FindMaster(service->get(), s.cell);
  if (!master.ok()) return fail(master.status());
  storage::cell::MasterClient client(*master, timeout);
  if (s.verb == "split") {
    auto children = client.SplitTablet(s.tablet_id, s.row);
    if (!children.ok()) return fail(children.status());
    for (const auto& c : *children) {
      if (s.json) {
        std::printf("{\"tablet\":\"%s\",\"start\":\"%s\",\"end\":\"%s\"}\n",
                    JsonEscape(c.id()).c_str(),
                    JsonEscape(EscapeBytes(c.start_row(), 1 << 20)).c_str(),
                    JsonEscape(EscapeBytes(c.end_row(), 1 << 20)).c_str());
        continue;
      }
      std::printf("%s [%s, %s)\n", c.id().c_str(), EscapeBytes(c.start_row()).c_str(),
                  c.end_row().empty() ? "(end)" : EscapeBytes(c.end_row()).c_str());
    }
    return 0;
  }
  if (s.verb == "move") {
    if (absl::Status st = client.MoveTablet(s.tablet_id, s.server); !st.ok()) return fail(st);
    if (s.json)
      std::printf("{\"tablet\":\"%s\",\"server\":\"%s\"}\n", JsonEscape(s.tablet_id).c_str(),
                  JsonEscape(s.server).c_str());
    else
      std::printf("tablet %s now served by %s\n", s.tablet_id.c_str(), s.server.c_str());
    return 0;
  }
  return 2;
}

}  // namespace megastore::tools
