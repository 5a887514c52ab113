#include "tools/msadmin/cell.h"

#include <cstdio>

#include "base/await.h"
#include "base/strings.h"
#include "storage/cell/connect.h"
#include "storage/cell/membership.h"

namespace megastore::tools {

void AddCellCommand(CLI::App& app, CellState& state) {
  CLI::App* cell = app.add_subcommand("cell", "A Bigtable cell, as its lock service sees it");
  cell->require_subcommand(1);
  CLI::App* status = cell->add_subcommand("status", "The master and the registered tablet servers");
  status->add_option("--lock-service", state.lock_service,
                     "HOST:PORT of a megastored running the lock role, or etcd:HOST:PORT[,HOST:PORT...]")
      ->required();
  status->add_option("--cell", state.cell, "the cell's name")->required();
  status->add_flag("--json", state.json, "one JSON object");
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
    std::fprintf(stderr, "msadmin cell status: cannot read the lock service %s: %s\n", s.lock_service.c_str(),
                 std::string((master.ok() ? servers.status() : master.status()).message()).c_str());
    return 1;
  }
  const std::string dir = storage::cell::ServersDir(s.cell);
  if (s.json) {
    std::string list;
    for (const auto& f : servers->files)
      list += StrCat(list.empty() ? "" : ",", "\"", JsonEscape(f.path.substr(dir.size())), "\"");
    std::printf("{\"cell\":\"%s\",\"master\":%s,\"tablet_servers\":[%s]}\n", JsonEscape(s.cell).c_str(),
                master->has_value() ? StrCat("\"", JsonEscape((*master)->contents), "\"").c_str() : "null",
                list.c_str());
    return 0;
  }
  std::printf("cell %s\n  master: %s\n  tablet servers: %zu\n", s.cell.c_str(),
              master->has_value() ? (*master)->contents.c_str() : "none (no master holds the lock)",
              servers->files.size());
  for (const auto& f : servers->files)
    std::printf("    %s (session %lld)\n", f.path.substr(dir.size()).c_str(), static_cast<long long>(f.session));
  return 0;
}

}  // namespace megastore::tools
