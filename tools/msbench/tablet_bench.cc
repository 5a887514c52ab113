#include "tools/msbench/tablet_bench.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include "base/crypto.h"
#include "base/env.h"
#include "base/logging.h"
#include "base/random.h"
#include "base/status.h"
#include "base/strings.h"
#include "replication/cell_crypto.h"
#include "rocksdb/db.h"
#include "storage/tablet/rocksdb_options.h"
#include "storage/tablet/tablet.h"
#include "tools/msbench/stats.h"

namespace megastore::tools {
namespace {

using storage::Mutation;
using storage::Row;

constexpr char kFamily[] = "f";
constexpr char kQualifier[] = "field0";

// YCSB's key: "user" followed by the FNV-1a 64-bit hash of the record number.
std::string YcsbKey(int64_t i) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (int b = 0; b < 8; ++b) {
    h ^= (static_cast<uint64_t>(i) >> (8 * b)) & 0xff;
    h *= 0x100000001b3ULL;
  }
  return "user" + std::to_string(h);
}

// Random lower-case letters, like YCSB's values: compressible, not trivially.
std::string RandomValue(Random& rng, int64_t size) {
  std::string v(static_cast<size_t>(size), 'a');
  for (char& c : v) c = static_cast<char>('a' + rng.Uniform(26));
  return v;
}

// One side of the comparison.
class Side {
 public:
  virtual ~Side() = default;
  virtual absl::Status Put(const std::string& key, const std::string& value) = 0;
  // Sets *found; the value is copied out, as a caller would.
  virtual absl::Status Get(const std::string& key, bool* found) = 0;
  // Reads up to `n` rows from `start`; *rows gets how many were read.
  virtual absl::Status Scan(const std::string& start, int64_t n, int64_t* rows) = 0;
  // Brings the store into a steady state before reads: all data flushed and
  // compacted into the last level.
  virtual absl::Status Settle() = 0;
};

class TabletSide : public Side {
 public:
  // `sealed`: values are sealed as an encrypted group's cells are.
  static absl::StatusOr<std::unique_ptr<TabletSide>> Open(const std::string& path, Env* env,
                                                          bool sealed) {
    auto side = std::unique_ptr<TabletSide>(new TabletSide());
    if (sealed) {
      MS_ASSIGN_OR_RETURN(side->cipher_,
                          replication::GroupCipher::Create(crypto::RandomBytes(crypto::kKeyBytes),
                                                           "usertable", "u"));
    }
    storage::TableSchema schema;
    schema.set_name("usertable");
    schema.add_families()->set_name(kFamily);
    if (sealed) {
      // As an encrypted schema's tables are made: ciphertext does not
      // compress, so SSTables do not try.
      storage::LocalityGroup* g = schema.add_locality_groups();
      g->set_name("default");
      g->set_compression(storage::LocalityGroup::NONE);
    }
    storage::TabletOptions options;
    options.path = path;
    MS_ASSIGN_OR_RETURN(side->tablet_,
                        storage::Tablet::Open(options, schema, &side->resources_, env));
    side->mutation_ = Mutation::SetCell(kFamily, kQualifier, "",
                                        sealed ? kSealedTimestamp : storage::kServerTimestamp);
    return side;
  }

  absl::Status Put(const std::string& key, const std::string& value) override {
    if (cipher_ != nullptr) {
      MS_ASSIGN_OR_RETURN(mutation_.value,
                          cipher_->SealCell(key, kFamily, kQualifier, kSealedTimestamp, value));
    } else {
      mutation_.value = value;
    }
    return tablet_->MutateRow(key, {&mutation_, 1});
  }

  absl::Status Get(const std::string& key, bool* found) override {
    MS_ASSIGN_OR_RETURN(std::optional<Row> row, tablet_->ReadRow(key));
    *found = row.has_value() && !row->cells.empty();
    if (*found) MS_RETURN_IF_ERROR(Open(*row));
    return absl::OkStatus();
  }

  // What a replica does with each cell it reads of an encrypted group.
  absl::Status Open(const Row& row) const {
    if (cipher_ == nullptr) return absl::OkStatus();
    for (const storage::Cell& c : row.cells) {
      MS_ASSIGN_OR_RETURN(replication::GroupCipher::Opened opened,
                          cipher_->OpenCell(row.key, c.family, c.qualifier, c.timestamp, c.value));
      if (opened.value.empty()) return absl::DataLossError("an opened value is empty");
    }
    return absl::OkStatus();
  }

  absl::Status Scan(const std::string& start, int64_t n, int64_t* rows) override {
    storage::RowSet set;
    set.ranges.push_back(storage::RowRange{start, ""});
    storage::ReadOptions o;
    o.rows_limit = n;
    *rows = 0;
    absl::Status opened;
    MS_RETURN_IF_ERROR(tablet_->ReadRows(set, o, [&](Row& row) {
      ++*rows;
      opened = Open(row);
      return opened.ok();
    }));
    return opened;
  }

  absl::Status Settle() override { return tablet_->CompactTablet(); }

 private:
  TabletSide() = default;
  static constexpr int64_t kSealedTimestamp = 1;
  storage::TabletResources resources_;
  std::unique_ptr<storage::Tablet> tablet_;
  Mutation mutation_;
  std::shared_ptr<const replication::GroupCipher> cipher_;
};

class RocksDBSide : public Side {
 public:
  static absl::StatusOr<std::unique_ptr<RocksDBSide>> Open(const std::string& path) {
    auto side = std::unique_ptr<RocksDBSide>(new RocksDBSide());
    const storage::StorageTuning tuning;
    rocksdb::Options options(
        storage::TabletDBOptions(&side->resources_, tuning),
        storage::LocalityGroupOptions(storage::LocalityGroup(), &side->resources_, tuning,
                                      storage::KeyFilter::kWholeKey));
    rocksdb::DB* db = nullptr;
    MS_RETURN_IF_ERROR(storage::FromRocksDB(rocksdb::DB::Open(options, path, &db), "open rocksdb"));
    side->db_.reset(db);
    return side;
  }

  absl::Status Put(const std::string& key, const std::string& value) override {
    return storage::FromRocksDB(db_->Put(rocksdb::WriteOptions(), key, value), "put");
  }

  absl::Status Get(const std::string& key, bool* found) override {
    const rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), key, &value_);
    *found = s.ok();
    return s.IsNotFound() ? absl::OkStatus() : storage::FromRocksDB(s, "get");
  }

  absl::Status Scan(const std::string& start, int64_t n, int64_t* rows) override {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    *rows = 0;
    std::vector<std::pair<std::string, std::string>> out;
    for (it->Seek(start); it->Valid() && *rows < n; it->Next()) {
      // Copy what a caller gets, as the tablet does.
      out.emplace_back(it->key().ToString(), it->value().ToString());
      ++*rows;
    }
    return storage::FromRocksDB(it->status(), "scan");
  }

  absl::Status Settle() override {
    MS_RETURN_IF_ERROR(storage::FromRocksDB(db_->Flush(rocksdb::FlushOptions()), "flush"));
    rocksdb::CompactRangeOptions o;
    o.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
    return storage::FromRocksDB(db_->CompactRange(o, nullptr, nullptr), "compact");
  }

 private:
  RocksDBSide() = default;
  storage::TabletResources resources_;
  std::unique_ptr<rocksdb::DB> db_;
  std::string value_;
};

struct RunResult {
  double put = 0, get = 0, scan = 0;  // ops per second
};

// Runs `ops` operations of one phase on both sides in interleaved chunks
// (alternating which side goes first), so that a noisy, shared machine slows
// both sides alike. `op(side, i)` performs operation i.
template <typename Op>
absl::Status Interleave(Side& a, Side& b, int64_t ops, Env* env, double* a_rate, double* b_rate,
                        Op op) {
  constexpr int64_t kChunks = 20;
  int64_t a_micros = 0, b_micros = 0;
  for (int64_t c = 0; c < kChunks; ++c) {
    const int64_t begin = ops * c / kChunks, end = ops * (c + 1) / kChunks;
    for (int turn = 0; turn < 2; ++turn) {
      const bool a_turn = (c + turn) % 2 == 0;
      Side& side = a_turn ? a : b;
      const int64_t start = env->MonotonicMicros();
      for (int64_t i = begin; i < end; ++i) MS_RETURN_IF_ERROR(op(side, i));
      (a_turn ? a_micros : b_micros) += env->MonotonicMicros() - start;
    }
  }
  *a_rate = static_cast<double>(ops) * 1e6 / static_cast<double>(std::max<int64_t>(a_micros, 1));
  *b_rate = static_cast<double>(ops) * 1e6 / static_cast<double>(std::max<int64_t>(b_micros, 1));
  return absl::OkStatus();
}

absl::Status RunOnce(Side& ours, Side& raw, const TabletBenchOptions& o, Env* env,
                     RunResult* ours_result, RunResult* raw_result) {
  Random rng(o.seed);
  std::vector<std::string> values;
  for (int i = 0; i < 64; ++i) values.push_back(RandomValue(rng, o.value_size));

  MS_RETURN_IF_ERROR(Interleave(
      ours, raw, o.keys, env, &ours_result->put, &raw_result->put, [&](Side& side, int64_t i) {
        return side.Put(YcsbKey(i), values[static_cast<size_t>(i) % values.size()]);
      }));
  MS_RETURN_IF_ERROR(ours.Settle());
  MS_RETURN_IF_ERROR(raw.Settle());

  // The same random key sequence for both sides.
  std::vector<int64_t> get_keys(static_cast<size_t>(o.gets));
  Random access(o.seed + 1);
  for (int64_t& k : get_keys) k = static_cast<int64_t>(access.Uniform(o.keys));
  int64_t found[2] = {0, 0};
  MS_RETURN_IF_ERROR(Interleave(
      ours, raw, o.gets, env, &ours_result->get, &raw_result->get, [&](Side& side, int64_t i) {
        bool f = false;
        MS_RETURN_IF_ERROR(side.Get(YcsbKey(get_keys[static_cast<size_t>(i)]), &f));
        found[&side == &ours ? 0 : 1] += f;
        return absl::OkStatus();
      }));
  for (int64_t f : found) {
    if (f != o.gets) {
      return absl::InternalError(
          StrCat("only ", f, " of ", o.gets, " point reads found their row"));
    }
  }

  std::vector<std::pair<int64_t, int64_t>> scans(static_cast<size_t>(o.scans));
  for (auto& [key, n] : scans) {
    key = static_cast<int64_t>(access.Uniform(o.keys));
    n = 1 + static_cast<int64_t>(access.Uniform(o.scan_length));
  }
  int64_t rows_read[2] = {0, 0};
  MS_RETURN_IF_ERROR(Interleave(ours, raw, o.scans, env, &ours_result->scan, &raw_result->scan,
                                [&](Side& side, int64_t i) {
                                  int64_t rows = 0;
                                  const auto& [key, n] = scans[static_cast<size_t>(i)];
                                  MS_RETURN_IF_ERROR(side.Scan(YcsbKey(key), n, &rows));
                                  rows_read[&side == &ours ? 0 : 1] += rows;
                                  return absl::OkStatus();
                                }));
  if (rows_read[0] != rows_read[1] || rows_read[0] == 0) {
    return absl::InternalError(StrCat("scans read ", rows_read[0], " rows from the tablet but ",
                                      rows_read[1], " from rocksdb"));
  }
  return absl::OkStatus();
}

}  // namespace

int RunTabletBench(const TabletBenchOptions& o) {
  SetLogLevel("warn");
  Env* env = Env::Default();
  std::string root = o.dir;
  const bool temp = root.empty();
  if (temp) {
    root = (std::filesystem::temp_directory_path() /
            ("msbench-tablet-" + std::to_string(env->Random64())))
               .string();
  }
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) {
    std::fprintf(stderr, "msbench: cannot create %s: %s\n", root.c_str(), ec.message().c_str());
    return 1;
  }

  std::vector<RunResult> ours, raw;
  for (int run = 0; run < o.runs; ++run) {
    const std::string tablet_path = StrCat(root, "/run", run, "-tablet");
    const std::string rocksdb_path = StrCat(root, "/run", run, "-rocksdb");
    auto tablet_side = TabletSide::Open(tablet_path, env, o.sealed);
    auto rocksdb_side = RocksDBSide::Open(rocksdb_path);
    absl::Status s = !tablet_side.ok() ? tablet_side.status() : rocksdb_side.status();
    RunResult a, b;
    if (s.ok()) s = RunOnce(**tablet_side, **rocksdb_side, o, env, &a, &b);
    tablet_side = absl::CancelledError();
    rocksdb_side = absl::CancelledError();
    std::filesystem::remove_all(tablet_path, ec);
    std::filesystem::remove_all(rocksdb_path, ec);
    if (!s.ok()) {
      std::fprintf(stderr, "msbench tablet: run %d failed: %s\n", run, s.ToString().c_str());
      if (temp) std::filesystem::remove_all(root, ec);
      return 1;
    }
    ours.push_back(a);
    raw.push_back(b);
  }
  if (temp) std::filesystem::remove_all(root, ec);

  struct Line {
    const char* op;
    double RunResult::*field;
    double goal;
  };
  const Line lines[] = {{"put", &RunResult::put, 0.7},
                        {"get", &RunResult::get, 0.8},
                        {"scan", &RunResult::scan, 0.8}};
  if (!o.json) {
    std::printf(
        "msbench tablet: %lld keys, %lld-byte values, %lld gets, %lld scans of 1..%lld rows, "
        "median of %d runs%s\n",
        static_cast<long long>(o.keys), static_cast<long long>(o.value_size),
        static_cast<long long>(o.gets), static_cast<long long>(o.scans),
        static_cast<long long>(o.scan_length), o.runs,
        o.sealed ? "; ours seals every value (AES-256-GCM) and opens every value read" : "");
    std::printf("%-5s %14s %16s %7s %6s\n", "op", "ours ops/s", "rocksdb ops/s", "ratio", "goal");
  }
  for (const Line& l : lines) {
    std::vector<double> a, b;
    for (const auto& r : ours) a.push_back(r.*(l.field));
    for (const auto& r : raw) b.push_back(r.*(l.field));
    std::vector<double> ratios;
    for (size_t i = 0; i < a.size(); ++i) ratios.push_back(a[i] / b[i]);
    const double mine = Median(a), theirs = Median(b);
    // The median of the per-run ratios: each run measures both sides side by
    // side, so its ratio is robust to the machine's speed drifting between runs.
    const double ratio = Median(ratios);
    if (o.json) {
      std::printf(
          "{\"op\":\"%s\",\"ours_ops_per_s\":%.0f,\"rocksdb_ops_per_s\":%.0f,\"ratio\":%.3f,"
          "\"goal\":%.2f,\"runs\":%d,\"keys\":%lld,\"value_size\":%lld,\"sealed\":%s}\n",
          l.op, mine, theirs, ratio, l.goal, o.runs, static_cast<long long>(o.keys),
          static_cast<long long>(o.value_size), o.sealed ? "true" : "false");
    } else {
      std::printf("%-5s %14.0f %16.0f %7.3f %6.2f\n", l.op, mine, theirs, ratio, l.goal);
    }
  }
  return 0;
}

}  // namespace megastore::tools
