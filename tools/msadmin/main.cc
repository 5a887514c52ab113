// msadmin: operates megastore. `msadmin --help` lists the commands.
#include <CLI/CLI.hpp>

#include "base/cli.h"
#include "base/init.h"
#include "base/logging.h"
#include "base/rpc/rpc.h"
#include "base/tool_defaults.h"
#include "tools/msadmin/acl.h"
#include "tools/msadmin/backup.h"
#include "tools/msadmin/bt.h"
#include "tools/msadmin/cell.h"
#include "tools/msadmin/certs.h"
#include "tools/msadmin/cluster.h"
#include "tools/msadmin/datadir.h"
#include "tools/msadmin/index.h"

int main(int argc, char** argv) {
  megastore::InitProcess();
  // Defaults from the rc file, as environment variables the flags read
  // (before the flags are defined: their defaults come from them).
  if (absl::Status s = megastore::LoadToolDefaults(); !s.ok()) {
    std::fprintf(stderr, "msadmin: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  CLI::App app{
      "msadmin: operate megastore (exit status: 0 ok, 1 the operation failed, 2 usage error)"};
  app.require_subcommand(1);
  megastore::tools::BtState bt;
  megastore::tools::AddBtCommand(app, bt);
  megastore::tools::IndexState index;
  megastore::tools::AddIndexCommand(app, index);
  megastore::tools::CellState cell;
  megastore::tools::AddCellCommand(app, cell);
  megastore::tools::AddTabletCommand(app, cell);
  megastore::tools::ClusterState cluster;
  megastore::tools::AddClusterCommands(app, cluster);
  megastore::tools::DatadirState datadir;
  megastore::tools::AddDatadirCommand(app, datadir);
  megastore::tools::CertsState certs;
  megastore::tools::AddCertsCommand(app, certs);
  megastore::tools::AclState acl;
  megastore::tools::AddAclCommand(app, acl);
  megastore::tools::BackupState backup;
  megastore::tools::AddBackupCommands(app, backup);
  megastore::rpc::TlsFiles tls;  // given before the command
  megastore::AddTlsFlags(app, tls, "this tool's", /*from_environment=*/true);
  megastore::SetLogLevel("warn");
  if (const int rc = megastore::ParseCommandLine(app, argc, argv); rc >= 0) return rc;
  if (absl::Status s = megastore::rpc::CheckTls(tls); !s.ok()) {
    std::fprintf(stderr, "msadmin: --tls-*: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  megastore::rpc::SetDefaultTls(tls);
  if (app.got_subcommand("bt")) return megastore::tools::RunBt(bt);
  if (app.got_subcommand("index")) return megastore::tools::RunIndex(index);
  if (app.got_subcommand("cell")) return megastore::tools::RunCell(cell);
  if (app.got_subcommand("tablet")) return megastore::tools::RunTablet(cell);
  if (app.got_subcommand("datadir")) return megastore::tools::RunDatadir(datadir);
  if (app.got_subcommand("certs")) return megastore::tools::RunCerts(certs);
  if (app.got_subcommand("acl")) return megastore::tools::RunAcl(acl);
  if (!backup.command.empty()) return megastore::tools::RunBackupCommand(backup);
  if (!cluster.command.empty()) return megastore::tools::RunClusterCommand(cluster);
  return 2;
}
