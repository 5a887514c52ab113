#include "tools/msbench/bt_bench.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "base/env.h"
#include "base/logging.h"
#include "base/random.h"
#include "base/rpc/rpc.h"
#include "base/status.h"
#include "base/strings.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"
#include "storage/tablet/rocksdb_options.h"
#include "storage/tabletserver/tablet_server.h"
#include "storage/tabletserver/tablet_service.h"
#include "tools/msbench/stats.h"

namespace megastore::tools {
namespace {

using storage::Mutation;
using storage::Row;

constexpr char kTable[] = "msbench";

std::string Key(uint64_t i) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (int b = 0; b < 8; ++b) {
    h ^= (i >> (8 * b)) & 0xff;
    h *= 0x100000001b3ULL;
  }
  return "user" + std::to_string(h);
}

struct Results {
  std::vector<double> write1, write64, get, scan, raw_write1, raw_write64, raw_get, raw_scan;
};

// Puts keys 0..keys-1 into `db` (its write phases took a different count),
// so every raw read finds a row as ours do. Unsynced, in batches.
absl::Status RefillRaw(rocksdb::DB* db, uint64_t keys, const std::string& value) {
  rocksdb::WriteBatch batch;
  for (uint64_t k = 0; k < keys; ++k) {
    batch.Put(Key(k), value);
    if (batch.Count() == 1000 || k + 1 == keys) {
      MS_RETURN_IF_ERROR(storage::FromRocksDB(db->Write(rocksdb::WriteOptions(), &batch), "put"));
      batch.Clear();
    }
  }
  return absl::OkStatus();
}

}  // namespace

int RunBtBench(const BtBenchOptions& o) {
  SetLogLevel("warn");
  Env* env = Env::Default();
  std::string root = o.dir;
  const bool temp = root.empty();
  if (temp)
    root =
        (std::filesystem::temp_directory_path() / StrCat("msbench-bt-", env->Random64())).string();
  std::error_code ec;
  std::filesystem::create_directories(root, ec);

  // The server under test: the given one, or one started here.
  std::unique_ptr<storage::TabletServer> local_server;
  std::unique_ptr<rpc::RpcServer> local_rpc;
  storage::ServiceMetrics metrics;
  std::string address = o.server;
  if (address.empty()) {
    storage::TabletServerOptions so;
    so.data_dir = root + "/server";
    auto s = storage::TabletServer::Open(so, env);
    if (!s.ok()) {
      std::fprintf(stderr, "msbench bt: %s\n", s.status().ToString().c_str());
      return 1;
    }
    local_server = std::move(*s);
    local_rpc = std::make_unique<rpc::RpcServer>(rpc::ServerOptions{});
    storage::RegisterTabletService(local_server.get(), local_rpc.get(), &metrics);
    if (absl::Status st = local_rpc->Start(); !st.ok()) {
      std::fprintf(stderr, "msbench bt: %s\n", st.ToString().c_str());
      return 1;
    }
    address = StrCat("127.0.0.1:", local_rpc->port());
  }

  const int many = o.clients;
  // Concurrent callers share connections: `connections` clients, round robin.
  std::vector<std::unique_ptr<storage::TabletClient>> connections;
  for (int i = 0; i < std::max(1, o.connections); ++i) {
    connections.push_back(std::make_unique<storage::TabletClient>(address));
  }
  std::vector<storage::TabletClient*> clients;
  for (int i = 0; i < many; ++i)
    clients.push_back(connections[static_cast<size_t>(i) % connections.size()].get());
  {
    storage::TableSchema schema;
    schema.set_name(kTable);
    schema.add_families()->set_name("f");
    absl::Status s = clients[0]->CreateTable(schema);
    if (!s.ok() && !absl::IsAlreadyExists(s)) {
      std::fprintf(stderr, "msbench bt: cannot create table %s on %s: %s\n", kTable,
                   address.c_str(), s.ToString().c_str());
      return 1;
    }
  }
  Random rng(o.seed);
  std::string value(static_cast<size_t>(o.value_size), 'a');
  for (char& c : value) c = static_cast<char>('a' + rng.Uniform(26));

  Results r;
  std::atomic<uint64_t> written{0};
  for (int run = 0; run < o.runs; ++run) {
    // Ours: synced writes over RPC from 1 and from `many` clients.
    auto write = [&](int t, uint64_t) {
      const uint64_t k = written.fetch_add(1);
      return clients[static_cast<size_t>(t)]->MutateRow(kTable, Key(k),
                                                        {Mutation::SetCell("f", "field0", value)});
    };
    auto w1 = Timed(1, o.seconds, env, write);
    auto wn = Timed(many, o.seconds, env, write);
    // Raw RocksDB in process, sync=true, same concurrency, fresh database.
    const std::string raw_path = StrCat(root, "/rocksdb-run", run);
    std::filesystem::create_directories(raw_path, ec);  // else RocksDB warns it cannot list it
    storage::TabletResources resources;
    const storage::StorageTuning tuning;
    rocksdb::Options ro(storage::TabletDBOptions(&resources, tuning),
                        storage::LocalityGroupOptions(storage::LocalityGroup(), &resources, tuning,
                                                      storage::KeyFilter::kWholeKey));
    rocksdb::DB* raw = nullptr;
    rocksdb::Status rs = rocksdb::DB::Open(ro, raw_path, &raw);
    if (!rs.ok()) {
      std::fprintf(stderr, "msbench bt: rocksdb: %s\n", rs.ToString().c_str());
      return 1;
    }
    std::unique_ptr<rocksdb::DB> db(raw);
    std::atomic<uint64_t> raw_written{0};
    auto raw_write = [&](int, uint64_t) {
      rocksdb::WriteOptions wo;
      wo.sync = true;
      return storage::FromRocksDB(db->Put(wo, Key(raw_written.fetch_add(1)), value), "put");
    };
    auto r1 = Timed(1, o.seconds, env, raw_write);
    auto rn = Timed(many, o.seconds, env, raw_write);

    // Reads: both hold the keys our server took and are read with the same
    // key sequence.
    const uint64_t keys = written.load();
    auto get_key = [&](int t, uint64_t i) {
      return Key((i * 2654435761u + static_cast<uint64_t>(t) * 40503u) %
                 std::max<uint64_t>(keys, 1));
    };
    auto scan_key = [&](int t, uint64_t i) {
      return Key((i * 7919u + static_cast<uint64_t>(t)) % std::max<uint64_t>(keys, 1));
    };
    if (absl::Status s = RefillRaw(db.get(), keys, value); !s.ok()) {
      std::fprintf(stderr, "msbench bt: rocksdb: %s\n", s.ToString().c_str());
      return 1;
    }
    auto get = Timed(many, o.seconds, env, [&](int t, uint64_t i) -> absl::Status {
      MS_ASSIGN_OR_RETURN(std::optional<Row> row,
                          clients[static_cast<size_t>(t)]->ReadRow(kTable, get_key(t, i)));
      if (!row) return absl::InternalError("a written row is missing");
      return absl::OkStatus();
    });
    auto raw_get = Timed(many, o.seconds, env, [&](int t, uint64_t i) -> absl::Status {
      std::string v;
      return storage::FromRocksDB(db->Get(rocksdb::ReadOptions(), get_key(t, i), &v), "get");
    });
    auto scan = Timed(many, o.seconds, env, [&](int t, uint64_t i) -> absl::Status {
      storage::RowSet set;
      set.ranges.push_back(storage::RowRange{scan_key(t, i), ""});
      storage::ReadOptions opts;
      opts.rows_limit = o.scan_length;
      return clients[static_cast<size_t>(t)]->ReadRows(kTable, set, opts,
                                                       [](Row&) { return true; });
    });
    auto raw_scan = Timed(many, o.seconds, env, [&](int t, uint64_t i) -> absl::Status {
      std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
      int64_t n = 0;
      for (it->Seek(scan_key(t, i)); it->Valid() && n < o.scan_length; it->Next(), ++n) {
        std::string copy = it->value().ToString();  // as a client would keep it
      }
      return storage::FromRocksDB(it->status(), "scan");
    });
    db.reset();
    std::filesystem::remove_all(raw_path, ec);
    for (const auto* res : {&w1, &wn, &r1, &rn, &get, &scan, &raw_get, &raw_scan}) {
      if (!res->ok()) {
        std::fprintf(stderr, "msbench bt: run %d failed: %s\n", run,
                     res->status().ToString().c_str());
        return 1;
      }
    }
    r.write1.push_back(*w1);
    r.write64.push_back(*wn);
    r.raw_write1.push_back(*r1);
    r.raw_write64.push_back(*rn);
    r.get.push_back(*get);
    r.scan.push_back(*scan);
    r.raw_get.push_back(*raw_get);
    r.raw_scan.push_back(*raw_scan);
  }
  clients.clear();
  connections.clear();
  local_rpc.reset();
  local_server.reset();
  if (temp) std::filesystem::remove_all(root, ec);

  const double w1 = Median(r.write1), wn = Median(r.write64);
  const double raw1 = Median(r.raw_write1), rawn = Median(r.raw_write64);
  std::vector<double> group_ratios, raw_ratios, write1_ratios, get_ratios, scan_ratios;
  for (size_t i = 0; i < r.write1.size(); ++i) {
    group_ratios.push_back(r.write64[i] / r.write1[i]);
    raw_ratios.push_back(r.write64[i] / r.raw_write64[i]);
    write1_ratios.push_back(r.write1[i] / r.raw_write1[i]);
    get_ratios.push_back(r.get[i] / r.raw_get[i]);
    scan_ratios.push_back(r.scan[i] / r.raw_scan[i]);
  }
  if (o.json) {
    std::printf(
        "{\"op\":\"write_1_client\",\"ours_ops_per_s\":%.0f,\"rocksdb_ops_per_s\":%.0f,\"ratio\":%."
        "3f,\"goal\":0.8}\n",
        w1, raw1, Median(write1_ratios));
    std::printf(
        "{\"op\":\"write_%d_clients\",\"ours_ops_per_s\":%.0f,\"rocksdb_ops_per_s\":%.0f,\"ratio\":"
        "%.3f,\"goal\":0.75}\n",
        many, wn, rawn, Median(raw_ratios));
    std::printf("{\"op\":\"group_commit_speedup\",\"ratio\":%.3f,\"goal\":3.0}\n",
                Median(group_ratios));
    std::printf(
        "{\"op\":\"get_%d_clients\",\"ours_ops_per_s\":%.0f,\"rocksdb_ops_per_s\":%.0f,\"ratio\":%"
        ".3f,\"goal\":0.5}\n",
        many, Median(r.get), Median(r.raw_get), Median(get_ratios));
    std::printf(
        "{\"op\":\"scan_%d_clients\",\"ours_ops_per_s\":%.0f,\"rocksdb_ops_per_s\":%.0f,"
        "\"ratio\":%.3f,\"goal\":0.5,\"rows_per_scan\":%lld}\n",
        many, Median(r.scan), Median(r.raw_scan), Median(scan_ratios),
        static_cast<long long>(o.scan_length));
  } else {
    std::printf("msbench bt: server %s%s, %lld-byte values, %.1f s per phase, median of %d runs\n",
                o.server.empty() ? "in-process (loopback RPC)" : o.server.c_str(),
                rpc::DefaultTls().enabled() ? " over TLS" : "",
                static_cast<long long>(o.value_size), o.seconds, o.runs);
    std::printf("%-28s %14s %16s %8s %6s\n", "op", "ours ops/s", "rocksdb ops/s", "ratio", "goal");
    std::printf("%-28s %14.0f %16.0f %8.3f %6s\n", "synced write, 1 client", w1, raw1,
                Median(write1_ratios), "0.8");
    std::printf("%-28s %14.0f %16.0f %8.3f %6s\n",
                StrCat("synced write, ", many, " clients").c_str(), wn, rawn, Median(raw_ratios),
                "0.75");
    std::printf("%-28s %14.3f %16s %8s %6s\n", StrCat("group commit: ", many, "/1 clients").c_str(),
                Median(group_ratios), "", "", "3.0");
    std::printf("%-28s %14.0f %16.0f %8.3f %6s\n", StrCat("point read, ", many, " clients").c_str(),
                Median(r.get), Median(r.raw_get), Median(get_ratios), "0.5");
    std::printf("%-28s %14.0f %16.0f %8.3f %6s   (%lld rows each)\n",
                StrCat("scan, ", many, " clients").c_str(), Median(r.scan), Median(r.raw_scan),
                Median(scan_ratios), "0.5", static_cast<long long>(o.scan_length));
  }
  return 0;
}

}  // namespace megastore::tools
