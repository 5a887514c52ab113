#include "tools/msadmin/bt.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <functional>
#include <map>
#include <optional>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/time/time.h"
#include "base/cli.h"
#include "base/coding.h"
#include "base/file.h"
#include "base/status.h"
#include "base/strings.h"
#include "schema/entity_json.h"
#include "schema/layout.h"
#include "server/cluster.h"
#include "storage/cell/cell_client.h"
#include "storage/cell/connect.h"
#include "storage/cell/master.h"
#include "storage/tabletserver/tablet_service.h"

namespace megastore::tools {
namespace {

using storage::Mutation;
using storage::Row;

// What a verb talks to: one tablet server, or a whole cell (its master for
// tables, the client library for data).
class Bigtable {
 public:
  virtual ~Bigtable() = default;
  virtual absl::StatusOr<std::vector<storage::TableSchema>> ListTables() = 0;
  virtual absl::StatusOr<storage::TableSchema> GetTable(const std::string& name) = 0;
  virtual absl::Status CreateTable(const storage::TableSchema& schema) = 0;
  virtual absl::Status DeleteTable(const std::string& name) = 0;
  virtual absl::Status UpdateTable(const storage::TableSchema& schema) = 0;
  virtual absl::Status MutateRow(const std::string& table, const std::string& row,
                                 const std::vector<Mutation>& mutations) = 0;
  virtual absl::StatusOr<std::optional<Row>> ReadRow(const std::string& table,
                                                     const std::string& row,
                                                     const storage::ReadOptions& options) = 0;
  // At most one range in `rows` (none: the whole table).
  virtual absl::Status ReadRows(const std::string& table, const storage::RowSet& rows,
                                const storage::ReadOptions& options,
                                const std::function<bool(Row&)>& on_row) = 0;
};

class OneServer : public Bigtable {
 public:
  OneServer(const std::string& address, absl::Duration timeout, bool force) : c_(address, timeout) {
    c_.set_force(force);
  }
  absl::StatusOr<std::vector<storage::TableSchema>> ListTables() override {
    return c_.ListTables();
  }
  absl::StatusOr<storage::TableSchema> GetTable(const std::string& name) override {
    return c_.GetTable(name);
  }
  absl::Status CreateTable(const storage::TableSchema& schema) override {
    return c_.CreateTable(schema);
  }
  absl::Status DeleteTable(const std::string& name) override { return c_.DeleteTable(name); }
  absl::Status UpdateTable(const storage::TableSchema& schema) override {
    return c_.UpdateTable(schema);
  }
  absl::Status MutateRow(const std::string& table, const std::string& row,
                         const std::vector<Mutation>& mutations) override {
    return c_.MutateRow(table, row, mutations);
  }
  absl::StatusOr<std::optional<Row>> ReadRow(const std::string& table, const std::string& row,
                                             const storage::ReadOptions& options) override {
    return c_.ReadRow(table, row, options);
  }
  absl::Status ReadRows(const std::string& table, const storage::RowSet& rows,
                        const storage::ReadOptions& options,
                        const std::function<bool(Row&)>& on_row) override {
    return c_.ReadRows(table, rows, options, on_row);
  }

 private:
  storage::TabletClient c_;
};

class WholeCell : public Bigtable {
 public:
  WholeCell(std::unique_ptr<storage::lock::LockService> lock, const std::string& cell,
            absl::Duration timeout, bool force)
      : lock_(std::move(lock)),
        cell_(cell),
        timeout_(timeout),
        force_(force),
        client_(lock_.get(), Env::Default(), Options()) {}
  absl::StatusOr<std::vector<storage::TableSchema>> ListTables() override {
    MS_ASSIGN_OR_RETURN(auto m, Master());
    return m->ListTables();
  }
  absl::StatusOr<storage::TableSchema> GetTable(const std::string& name) override {
    MS_ASSIGN_OR_RETURN(auto tables, ListTables());
    for (auto& t : tables) {
      if (t.name() == name) return t;
    }
    return absl::NotFoundError(StrCat("table ", name, " does not exist in cell ", cell_));
  }
  absl::Status CreateTable(const storage::TableSchema& schema) override {
    MS_ASSIGN_OR_RETURN(auto m, Master());
    return m->CreateTable(schema);
  }
  absl::Status DeleteTable(const std::string& name) override {
    MS_ASSIGN_OR_RETURN(auto m, Master());
    return m->DeleteTable(name, force_);
  }
  absl::Status UpdateTable(const storage::TableSchema& schema) override {
    MS_ASSIGN_OR_RETURN(auto m, Master());
    return m->UpdateTable(schema, force_);
  }
  absl::Status MutateRow(const std::string& table, const std::string& row,
                         const std::vector<Mutation>& mutations) override {
    return client_.MutateRow(table, row, mutations);
  }
  absl::StatusOr<std::optional<Row>> ReadRow(const std::string& table, const std::string& row,
                                             const storage::ReadOptions& options) override {
    return client_.ReadRow(table, row, options);
  }
  absl::Status ReadRows(const std::string& table, const storage::RowSet& rows,
                        const storage::ReadOptions& options,
                        const std::function<bool(Row&)>& on_row) override {
    return client_.ReadRows(table, rows.ranges.empty() ? storage::RowRange::All() : rows.ranges[0],
                            options, on_row);
  }

 private:
  storage::cell::CellClientOptions Options() const {
    storage::cell::CellClientOptions o;
    o.cell = cell_;
    o.retry_for = timeout_;
    o.force_replicated = force_;
    return o;
  }
  absl::StatusOr<std::unique_ptr<storage::cell::MasterClient>> Master() {
    MS_ASSIGN_OR_RETURN(std::string address, storage::cell::FindMaster(lock_.get(), cell_));
    return std::make_unique<storage::cell::MasterClient>(address, timeout_);
  }

  std::unique_ptr<storage::lock::LockService> lock_;
  const std::string cell_;
  const absl::Duration timeout_;
  const bool force_;
  storage::cell::CellClient client_;
};

// key=value arguments after the positional ones, cbt style.
// A mistake in the command line (as opposed to an error from the server):
// the usage line is printed after it.
absl::Status UsageError(std::string message) {
  absl::Status s = absl::InvalidArgumentError(std::move(message));
  s.SetPayload("msadmin.usage", absl::Cord("1"));
  return s;
}

bool IsUsageError(const absl::Status& s) { return s.GetPayload("msadmin.usage").has_value(); }

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> named;
};

absl::StatusOr<Args> Split(const std::vector<std::string>& raw, size_t positional,
                           std::initializer_list<std::string_view> allowed) {
  Args a;
  for (const std::string& s : raw) {
    if (a.positional.size() < positional) {
      a.positional.push_back(s);
      continue;
    }
    const size_t eq = s.find('=');
    const std::string key = s.substr(0, eq);
    if (eq == std::string::npos ||
        std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string list;
      for (std::string_view k : allowed) list += StrCat(" ", k, "=");
      return UsageError(StrCat("unexpected argument \"", s, "\"",
                               list.empty() ? "" : StrCat("; allowed:", list)));
    }
    a.named[key] = s.substr(eq + 1);
  }
  if (a.positional.size() < positional) {
    return UsageError(StrCat("expected ", positional, " argument(s), got ", a.positional.size()));
  }
  return a;
}

// "7d", "12h", "30m", "10s", "500ms".
absl::StatusOr<absl::Duration> ParseAge(const std::string& text) {
  absl::Duration d;
  if (!text.empty() && text.back() == 'd') {
    int64_t days;
    if (absl::SimpleAtoi(text.substr(0, text.size() - 1), &days) && days > 0)
      return absl::Hours(24 * days);
  } else if (absl::ParseDuration(text, &d) && d > absl::ZeroDuration()) {
    return d;
  }
  return UsageError(StrCat("\"", text, "\" is not an age (examples: 7d, 12h, 30m, 10s)"));
}

// "maxversions=N", "maxage=D", "never", or two of them joined by " or " /
// " and " (Cloud Bigtable's union / intersection).
absl::StatusOr<storage::GcRule> ParseGcPolicy(const std::string& text) {
  storage::GcRule rule;
  std::vector<std::string> terms;
  if (text == "never" || text.empty()) return rule;
  size_t pos;
  if ((pos = text.find(" or ")) != std::string::npos) {
    terms = {text.substr(0, pos), text.substr(pos + 4)};
  } else if ((pos = text.find(" and ")) != std::string::npos) {
    terms = {text.substr(0, pos), text.substr(pos + 5)};
    rule.set_mode(storage::GcRule::INTERSECTION);
  } else {
    terms = {text};
  }
  for (const std::string& t : terms) {
    const size_t eq = t.find('=');
    const std::string key = t.substr(0, eq),
                      value = eq == std::string::npos ? "" : t.substr(eq + 1);
    if (key == "maxversions") {
      int n;
      if (!absl::SimpleAtoi(value, &n) || n <= 0) {
        return UsageError(StrCat("maxversions=", value, " is not a positive number"));
      }
      rule.set_max_versions(n);
    } else if (key == "maxage") {
      absl::StatusOr<absl::Duration> d = ParseAge(value);
      if (!d.ok()) return d.status();
      rule.set_max_age_micros(absl::ToInt64Microseconds(*d));
    } else {
      return UsageError(StrCat("GC policy \"", text,
                               "\" not understood; use maxversions=N, maxage=D, never, or two "
                               "joined by \" or \" / \" and \""));
    }
  }
  return rule;
}

std::string FormatGcPolicy(const storage::GcRule& r) {
  std::vector<std::string> parts;
  if (r.max_versions() > 0) parts.push_back(StrCat("maxversions=", r.max_versions()));
  if (r.max_age_micros() > 0)
    parts.push_back(
        StrCat("maxage=", absl::FormatDuration(absl::Microseconds(r.max_age_micros()))));
  if (parts.empty()) return "<never>";
  if (parts.size() == 1) return parts[0];
  return StrCat(parts[0], r.mode() == storage::GcRule::INTERSECTION ? " and " : " or ", parts[1]);
}

std::string FormatTimestamp(int64_t micros) {
  const absl::Time t = absl::FromUnixMicros(micros);
  return absl::FormatTime("%Y/%m/%d-%H:%M:%E6S", t, absl::UTCTimeZone());
}

// Bytes as printable ASCII: `"` and `\` escaped, other bytes outside
// 0x20-0x7e as \xHH (a NUL included: nothing is cut short). DecodeBytes
// reads it back.
std::string Escape(std::string_view v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    const char c = v[i];
    const auto u = static_cast<unsigned char>(c);
    // A leading "hex:" and any '@' (set's timestamp mark) as \xHH, so
    // that what is printed reads back as the same bytes.
    if ((i == 0 && v.substr(0, 4) == "hex:") || c == '@') {
      out += fmt::format("\\x{:02x}", u);
    } else if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (u >= 0x20 && u < 0x7f) {
      out.push_back(c);
    } else {
      out += fmt::format("\\x{:02x}", u);
    }
  }
  return out;
}

std::string Quote(std::string_view v) { return StrCat("\"", Escape(v), "\""); }

// Output of the verbs that print rows (lookup, read): text or JSON lines.
bool print_json = false;
// With --schema: the layout whose entity table's rows are decoded, and
// whether the table being read is that one.
std::unique_ptr<schema::Layout> decode_layout;
bool decoding = false;

// The entities stored in `row` of a schema's entity table, by table, as
// JSON objects (protobuf's JSON of the entity, as the gateway shows it).
std::vector<std::pair<std::string, std::string>> DecodedEntities(const Row& row) {
  std::vector<std::pair<std::string, std::string>> out;
  if (!decoding) return out;
  const schema::SchemaIndex& sx = decode_layout->schema();
  for (const schema::TableDescriptor& t : sx.schema().tables()) {
    const std::string prefix = t.name() + ".";
    const bool has_cells = std::any_of(row.cells.begin(), row.cells.end(), [&](const auto& c) {
      return c.family == schema::kEntityFamily &&
             c.qualifier.compare(0, prefix.size(), prefix) == 0;
    });
    if (!has_cells) continue;
    absl::StatusOr<schema::Entity> e = decode_layout->EntityFromRow(t, row);
    std::string json;
    if (!e.ok()) {
      json = StrCat("{\"error\":\"", JsonEscape(e.status().ToString()), "\"}");
    } else if (!google::protobuf::util::MessageToJsonString(schema::EntityToJson(sx, t, *e), &json)
                    .ok()) {
      json = "{\"error\":\"not printable as JSON\"}";
    }
    out.emplace_back(t.name(), std::move(json));
  }
  return out;
}

void PrintRow(const Row& row) {
  if (print_json) {
    // One object per row; keys, qualifiers and values escaped as in text
    // (\xHH), so the line is valid JSON whatever the bytes.
    std::string cells;
    for (const storage::Cell& c : row.cells)
      cells += StrCat(cells.empty() ? "" : ",", "{\"family\":\"", JsonEscape(c.family),
                      "\",\"qualifier\":\"", JsonEscape(Escape(c.qualifier)), "\",\"timestamp\":\"",
                      c.timestamp, "\",\"time\":\"", FormatTimestamp(c.timestamp),
                      "\",\"value\":\"", JsonEscape(Escape(c.value)), "\"}");
    std::string entities;
    for (const auto& [table, json] : DecodedEntities(row))
      entities += StrCat(entities.empty() ? "" : ",", "\"", JsonEscape(table), "\":", json);
    std::printf("{\"key\":\"%s\",\"cells\":[%s]%s}\n", JsonEscape(Escape(row.key)).c_str(),
                cells.c_str(), decoding ? StrCat(",\"entities\":{", entities, "}").c_str() : "");
    return;
  }
  std::printf("----------------------------------------\n%s\n", Escape(row.key).c_str());
  for (const storage::Cell& c : row.cells) {
    std::printf("  %-40s @ %s\n    %s\n", StrCat(c.family, ":", Escape(c.qualifier)).c_str(),
                FormatTimestamp(c.timestamp).c_str(), Quote(c.value).c_str());
  }
  for (const auto& [table, json] : DecodedEntities(row))
    std::printf("  = %s %s\n", table.c_str(), json.c_str());
}

// A row key, qualifier or value given on the command line: "hex:" and hex
// digits, or text with the escapes Escape writes (\xHH, \\, \") and \n,
// \t, \0. A usage error names `what` and the problem.
absl::StatusOr<std::string> DecodeBytes(std::string_view text, std::string_view what) {
  std::string out;
  if (text.substr(0, 4) == "hex:") {
    const std::string_view hex = text.substr(4);
    if (hex.size() % 2 != 0 ||
        hex.find_first_not_of("0123456789abcdefABCDEF") != std::string_view::npos)
      return UsageError(
          StrCat(what, " \"", text, "\": hex: needs an even number of hex digits (0-9, a-f)"));
    for (size_t i = 0; i < hex.size(); i += 2) {
      int byte = 0;
      if (!absl::SimpleHexAtoi(ToAbsl(hex.substr(i, 2)), &byte))
        return UsageError(StrCat(what, " \"", text, "\": not hex"));
      out.push_back(static_cast<char>(byte));
    }
    return out;
  }
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out.push_back(text[i]);
      continue;
    }
    const char next = i + 1 < text.size() ? text[i + 1] : '\0';
    int byte = 0;
    if (next == '\\' || next == '"') {
      out.push_back(next);
      ++i;
    } else if (next == 'n' || next == 't' || next == '0') {
      out.push_back(next == 'n' ? '\n' : next == 't' ? '\t' : '\0');
      ++i;
    } else if (next == 'x' && i + 4 <= text.size() &&
               std::isxdigit(static_cast<unsigned char>(text[i + 2])) &&
               std::isxdigit(static_cast<unsigned char>(text[i + 3])) &&
               absl::SimpleHexAtoi(ToAbsl(text.substr(i + 2, 2)), &byte)) {
      out.push_back(static_cast<char>(byte));
      i += 3;
    } else {
      return UsageError(
          StrCat(what, " \"", text,
                 "\": a backslash starts \\xHH, \\\\, \\\", \\n, \\t or \\0 (at byte ", i, ")"));
    }
  }
  return out;
}

// columns=family[:qualifier],...: which cells to keep (client side for
// combinations a single filter cannot express).
struct Columns {
  std::vector<std::pair<std::string, std::optional<std::string>>> wanted;
  bool Keeps(const storage::Cell& c) const {
    if (wanted.empty()) return true;
    for (const auto& [f, q] : wanted) {
      if (f == c.family && (!q || *q == c.qualifier)) return true;
    }
    return false;
  }
};

absl::StatusOr<Columns> ParseColumns(const Args& a, storage::ReadOptions* o) {
  Columns cols;
  auto it = a.named.find("columns");
  if (it != a.named.end()) {
    size_t start = 0;
    const std::string& s = it->second;
    while (start <= s.size()) {
      const size_t comma = s.find(',', start);
      const std::string item =
          s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (item.empty()) return UsageError(StrCat("columns=", s, " has an empty entry"));
      const size_t colon = item.find(':');
      std::optional<std::string> qualifier;
      if (colon != std::string::npos) {
        MS_ASSIGN_OR_RETURN(qualifier, DecodeBytes(item.substr(colon + 1), "qualifier"));
      }
      cols.wanted.emplace_back(item.substr(0, colon), std::move(qualifier));
      o->filter.families.push_back(item.substr(0, colon));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    std::sort(o->filter.families.begin(), o->filter.families.end());
    o->filter.families.erase(std::unique(o->filter.families.begin(), o->filter.families.end()),
                             o->filter.families.end());
    if (cols.wanted.size() == 1 && cols.wanted[0].second) {
      o->filter.qualifier_match = storage::RowFilter::QualifierMatch::kExact;
      o->filter.qualifier = *cols.wanted[0].second;
    }
  }
  if (auto c = a.named.find("cells-per-column"); c != a.named.end()) {
    if (!absl::SimpleAtoi(c->second, &o->filter.cells_per_column) ||
        o->filter.cells_per_column <= 0) {
      return UsageError(StrCat("cells-per-column=", c->second, " is not a positive number"));
    }
  }
  return cols;
}

absl::Status Ls(Bigtable& c, const std::vector<std::string>& raw) {
  if (raw.size() > 1) return UsageError("ls takes at most one table");
  if (raw.empty()) {
    MS_ASSIGN_OR_RETURN(auto tables, c.ListTables());
    for (const auto& t : tables) std::printf("%s\n", t.name().c_str());
    return absl::OkStatus();
  }
  MS_ASSIGN_OR_RETURN(storage::TableSchema t, c.GetTable(raw[0]));
  std::printf("%-20s %s\n", "Family Name", "GC Policy");
  std::printf("%-20s %s\n", "-----------", "---------");
  for (const auto& f : t.families())
    std::printf("%-20s %s\n", f.name().c_str(), FormatGcPolicy(f.gc_rule()).c_str());
  return absl::OkStatus();
}

absl::Status CreateTable(Bigtable& c, const std::vector<std::string>& raw) {
  MS_ASSIGN_OR_RETURN(Args a, Split(raw, 1, {"families"}));
  storage::TableSchema schema;
  schema.set_name(a.positional[0]);
  if (auto it = a.named.find("families"); it != a.named.end()) {
    std::string spec = it->second;
    size_t start = 0;
    while (start < spec.size()) {
      size_t comma = spec.find(',', start);
      // A comma inside a policy ("maxage=1d or maxversions=2") is not a separator;
      // families are name[:policy], so only split before something with a ':' or
      // a bare name.
      std::string item =
          spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      const size_t colon = item.find(':');
      auto* f = schema.add_families();
      f->set_name(item.substr(0, colon));
      if (colon != std::string::npos) {
        MS_ASSIGN_OR_RETURN(*f->mutable_gc_rule(), ParseGcPolicy(item.substr(colon + 1)));
      }
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return c.CreateTable(schema);
}

absl::Status DeleteTable(Bigtable& c, const std::vector<std::string>& raw) {
  MS_ASSIGN_OR_RETURN(Args a, Split(raw, 1, {}));
  return c.DeleteTable(a.positional[0]);
}

absl::Status CreateFamily(Bigtable& c, const std::vector<std::string>& raw) {
  MS_ASSIGN_OR_RETURN(Args a, Split(raw, 2, {}));
  MS_ASSIGN_OR_RETURN(storage::TableSchema t, c.GetTable(a.positional[0]));
  for (const auto& f : t.families()) {
    if (f.name() == a.positional[1]) {
      return absl::AlreadyExistsError(
          StrCat("family ", a.positional[1], " already exists in ", a.positional[0]));
    }
  }
  t.add_families()->set_name(a.positional[1]);
  return c.UpdateTable(t);
}

absl::Status SetGcPolicy(Bigtable& c, const std::vector<std::string>& raw) {
  if (raw.size() < 3)
    return UsageError("usage: setgcpolicy TABLE FAMILY maxversions=N|maxage=D|never");
  std::string policy = raw[2];
  for (size_t i = 3; i < raw.size(); ++i)
    policy += " " + raw[i];  // "maxage=1d or maxversions=2" unquoted
  MS_ASSIGN_OR_RETURN(storage::GcRule rule, ParseGcPolicy(policy));
  MS_ASSIGN_OR_RETURN(storage::TableSchema t, c.GetTable(raw[0]));
  bool found = false;
  for (auto& f : *t.mutable_families()) {
    if (f.name() == raw[1]) {
      *f.mutable_gc_rule() = rule;
      found = true;
    }
  }
  if (!found) return absl::NotFoundError(StrCat("table ", raw[0], " has no family ", raw[1]));
  return c.UpdateTable(t);
}

absl::Status Set(Bigtable& c, const std::vector<std::string>& raw) {
  if (raw.size() < 3)
    return UsageError("usage: set TABLE ROW family:qualifier=value[@timestamp] ...");
  std::vector<Mutation> mutations;
  for (size_t i = 2; i < raw.size(); ++i) {
    const std::string& s = raw[i];
    const size_t colon = s.find(':'), eq = s.find('=');
    if (colon == std::string::npos || eq == std::string::npos || eq < colon) {
      return UsageError(StrCat("\"", s, "\" is not family:qualifier=value[@timestamp]"));
    }
    std::string value = s.substr(eq + 1);
    int64_t ts = storage::kServerTimestamp;
    if (const size_t at = value.rfind('@'); at != std::string::npos) {
      int64_t parsed;
      if (absl::SimpleAtoi(value.substr(at + 1), &parsed) && parsed >= 0) {
        ts = parsed;
        value.resize(at);
      }
    }
    MS_ASSIGN_OR_RETURN(std::string qualifier,
                        DecodeBytes(s.substr(colon + 1, eq - colon - 1), "qualifier"));
    MS_ASSIGN_OR_RETURN(value, DecodeBytes(value, "value"));
    mutations.push_back(Mutation::SetCell(s.substr(0, colon), qualifier, value, ts));
  }
  MS_ASSIGN_OR_RETURN(std::string row, DecodeBytes(raw[1], "row"));
  return c.MutateRow(raw[0], row, mutations);
}

absl::Status Lookup(Bigtable& c, const std::vector<std::string>& raw) {
  MS_ASSIGN_OR_RETURN(Args a, Split(raw, 2, {"columns", "cells-per-column"}));
  storage::ReadOptions o;
  MS_ASSIGN_OR_RETURN(Columns cols, ParseColumns(a, &o));
  MS_ASSIGN_OR_RETURN(std::string key, DecodeBytes(a.positional[1], "row"));
  decoding = decode_layout != nullptr && a.positional[0] == decode_layout->entity_table();
  MS_ASSIGN_OR_RETURN(std::optional<Row> row, c.ReadRow(a.positional[0], key, o));
  if (!row) return absl::OkStatus();
  std::erase_if(row->cells, [&](const storage::Cell& cell) { return !cols.Keeps(cell); });
  if (!row->cells.empty()) PrintRow(*row);
  return absl::OkStatus();
}

absl::Status Read(Bigtable& c, const std::vector<std::string>& raw) {
  MS_ASSIGN_OR_RETURN(
      Args a, Split(raw, 1, {"start", "end", "prefix", "count", "columns", "cells-per-column"}));
  storage::ReadOptions o;
  MS_ASSIGN_OR_RETURN(Columns cols, ParseColumns(a, &o));
  storage::RowSet set;
  if (auto p = a.named.find("prefix"); p != a.named.end()) {
    if (a.named.contains("start") || a.named.contains("end")) {
      return UsageError("prefix= cannot be combined with start= or end=");
    }
    MS_ASSIGN_OR_RETURN(std::string prefix, DecodeBytes(p->second, "prefix"));
    set.ranges.push_back(storage::RowRange::Prefix(prefix));
  } else if (a.named.contains("start") || a.named.contains("end")) {
    MS_ASSIGN_OR_RETURN(std::string start, DecodeBytes(a.named["start"], "start"));
    MS_ASSIGN_OR_RETURN(std::string end, DecodeBytes(a.named["end"], "end"));
    set.ranges.push_back(storage::RowRange{start, end});
  }
  int64_t count = 0;
  if (auto n = a.named.find("count"); n != a.named.end()) {
    if (!absl::SimpleAtoi(n->second, &count) || count <= 0) {
      return UsageError(StrCat("count=", n->second, " is not a positive number"));
    }
  }
  int64_t printed = 0;
  decoding = decode_layout != nullptr && a.positional[0] == decode_layout->entity_table();
  return c.ReadRows(a.positional[0], set, o, [&](Row& row) {
    std::erase_if(row.cells, [&](const storage::Cell& cell) { return !cols.Keeps(cell); });
    if (row.cells.empty()) return true;
    PrintRow(row);
    return count == 0 || ++printed < count;
  });
}

absl::Status Count(Bigtable& c, const std::vector<std::string>& raw) {
  MS_ASSIGN_OR_RETURN(Args a, Split(raw, 1, {}));
  storage::ReadOptions o;
  o.filter.cells_per_column = 1;
  o.filter.strip_value = true;
  int64_t n = 0;
  MS_RETURN_IF_ERROR(c.ReadRows(a.positional[0], {}, o, [&](Row&) {
    ++n;
    return true;
  }));
  std::printf("%lld\n", static_cast<long long>(n));
  return absl::OkStatus();
}

absl::Status DeleteRow(Bigtable& c, const std::vector<std::string>& raw) {
  MS_ASSIGN_OR_RETURN(Args a, Split(raw, 2, {}));
  MS_ASSIGN_OR_RETURN(std::string row, DecodeBytes(a.positional[1], "row"));
  return c.MutateRow(a.positional[0], row, {Mutation::DeleteRow()});
}

absl::Status DeleteColumn(Bigtable& c, const std::vector<std::string>& raw) {
  MS_ASSIGN_OR_RETURN(Args a, Split(raw, 3, {}));
  const std::string& col = a.positional[2];
  const size_t colon = col.find(':');
  if (colon == std::string::npos)
    return UsageError(StrCat("\"", col, "\" is not family:qualifier"));
  MS_ASSIGN_OR_RETURN(std::string row, DecodeBytes(a.positional[1], "row"));
  MS_ASSIGN_OR_RETURN(std::string qualifier, DecodeBytes(col.substr(colon + 1), "qualifier"));
  return c.MutateRow(a.positional[0], row,
                     {Mutation::DeleteCells(col.substr(0, colon), qualifier)});
}

struct VerbInfo {
  const char* name;
  const char* usage;
  const char* help;
  absl::Status (*run)(Bigtable&, const std::vector<std::string>&);
};

const VerbInfo kVerbs[] = {
    {"ls", "ls [TABLE]", "List tables, or a table's families and GC policies", Ls},
    {"createtable", "createtable TABLE [families=f1[:POLICY],f2[:POLICY],...]",
     "Create a table; POLICY is maxversions=N, maxage=D (7d, 12h, 30m), never, or two joined by ' "
     "or ' / ' and '",
     CreateTable},
    {"deletetable", "deletetable TABLE", "Delete a table and all its data", DeleteTable},
    {"createfamily", "createfamily TABLE FAMILY", "Add a column family", CreateFamily},
    {"setgcpolicy", "setgcpolicy TABLE FAMILY POLICY",
     "Set a family's GC policy (maxversions=N, maxage=D, never)", SetGcPolicy},
    {"set", "set TABLE ROW family:qualifier=value[@timestamp] ...",
     "Write cells (timestamp in microseconds; default: server time)", Set},
    {"lookup", "lookup TABLE ROW [columns=family[:qualifier],...] [cells-per-column=N]",
     "Read one row", Lookup},
    {"read",
     "read TABLE [start=ROW] [end=ROW] [prefix=P] [count=N] [columns=...] [cells-per-column=N]",
     "Read rows in order", Read},
    {"count", "count TABLE", "Count the rows of a table", Count},
    {"deleterow", "deleterow TABLE ROW", "Delete a row", DeleteRow},
    {"deletecolumn", "deletecolumn TABLE ROW family:qualifier",
     "Delete every cell of one column of a row", DeleteColumn},
};

}  // namespace

void AddBtCommand(CLI::App& app, BtState& state) {
  CLI::App* bt = app.add_subcommand(
      "bt",
      "Bigtable data and tables on one tablet server or a whole cell, like Cloud Bigtable's cbt");
  bt->add_option("--server", state.server, "tablet server HOST:PORT");
  bt->add_option("--cell", state.cell, "instead of --server: a Bigtable cell (docs/cell.md) ...");
  bt->add_option("--lock-service", state.lock_service,
                 "... and its lock service (HOST:PORT, or etcd:HOST:PORT[,...])");
  bt->add_option("--config", state.config,
                 "instead of --server: a cluster config (docs/operations.md) ...");
  bt->add_option("--datacenter", state.datacenter, "... and the datacenter whose Bigtable to use");
  bt->add_option("--schema", state.schema,
                 "a schema descriptor (msc --out's NAME.schema.pb): lookup and read of its entity "
                 "table also print each row's entities, decoded");
  bt->add_flag("--force", state.force,
               "write to, delete or change a table Megastore replicates (refused otherwise: it "
               "would make this "
               "datacenter's copy differ; needs the admin role)");
  bt->add_option("--timeout", state.timeout, "seconds to wait for each call")
      ->check(CLI::Range(0.001, 86400.0))
      ->capture_default_str();
  AddOutputOption(bt, state.json,
                  "lookup and read: one object per row, {key, cells: [{family, qualifier, "
                  "timestamp, time, value}]}, bytes escaped as in text");
  bt->require_subcommand(1);
  for (const VerbInfo& v : kVerbs) {
    CLI::App* sub = bt->add_subcommand(
        v.name, std::string(v.help) + "\nusage: msadmin bt --server=HOST:PORT " + v.usage);
    sub->add_option("args", state.args, v.usage);
    sub->fallthrough();  // bt's options (-o, --schema, ...) may follow the verb
    sub->allow_extras(false);
    sub->callback([&state, &v] { state.verb = &v - kVerbs; });
  }
}

int RunBt(const BtState& state) {
  if (state.verb < 0) return 2;
  const VerbInfo& v = kVerbs[state.verb];
  std::string server = state.server;
  if (int(!server.empty()) + int(!state.config.empty()) + int(!state.cell.empty()) != 1) {
    std::fprintf(stderr,
                 "msadmin bt: give one of --server=HOST:PORT, --config=FILE with "
                 "--datacenter=NAME, or --cell=NAME "
                 "with --lock-service=...\n");
    return 2;
  }
  if (!state.cell.empty() && state.lock_service.empty()) {
    std::fprintf(stderr, "msadmin bt: --cell=%s needs --lock-service=HOST:PORT|etcd:HOST:PORT\n",
                 state.cell.c_str());
    return 2;
  }
  if (!state.config.empty()) {
    absl::StatusOr<server::ClusterConfig> config = server::LoadClusterConfigForClient(state.config);
    if (!config.ok()) {
      std::fprintf(stderr, "msadmin bt: %s\n", std::string(config.status().message()).c_str());
      return 2;
    }
    for (const auto& dc : config->datacenters()) {
      if (dc.name() != state.datacenter) continue;
      if (!dc.bigtable_cell().name().empty()) {
        // That datacenter's Bigtable is a cell: reach it as one.
        BtState cell_state = state;
        cell_state.config.clear();
        cell_state.cell = dc.bigtable_cell().name();
        cell_state.lock_service = dc.bigtable_cell().lock_service();
        return RunBt(cell_state);
      }
      server = server::AddressOf(dc, server::Role::kTablet);
    }
    if (server.empty()) {
      std::fprintf(stderr, "msadmin bt: --datacenter=%s is not in %s\n", state.datacenter.c_str(),
                   state.config.c_str());
      return 2;
    }
  }
  std::unique_ptr<Bigtable> target;
  if (!state.cell.empty()) {
    auto lock = storage::cell::ConnectLockService(state.lock_service);
    if (!lock.ok()) {
      std::fprintf(stderr, "msadmin bt: --lock-service: %s\n",
                   std::string(lock.status().message()).c_str());
      return 2;
    }
    target = std::make_unique<WholeCell>(std::move(*lock), state.cell, absl::Seconds(state.timeout),
                                         state.force);
  } else {
    target = std::make_unique<OneServer>(server, absl::Seconds(state.timeout), state.force);
  }
  print_json = state.json;
  if (!state.schema.empty()) {
    absl::StatusOr<std::string> bytes = ReadFileToString(state.schema, 64 << 20);
    schema::SchemaDescriptor d;
    if (!bytes.ok() || !d.ParseFromString(*bytes) || d.name().empty()) {
      std::fprintf(stderr, "msadmin bt: --schema=%s: %s\n", state.schema.c_str(),
                   bytes.ok() ? "not a schema descriptor (msc --out writes NAME.schema.pb)"
                              : std::string(bytes.status().message()).c_str());
      return 2;
    }
    absl::StatusOr<schema::Layout> layout = schema::Layout::Create(d);
    if (!layout.ok()) {
      std::fprintf(stderr, "msadmin bt: --schema=%s: %s\n", state.schema.c_str(),
                   std::string(layout.status().message()).c_str());
      return 2;
    }
    decode_layout = std::make_unique<schema::Layout>(*std::move(layout));
  }
  absl::Status s = v.run(*target, state.args);
  if (!s.ok()) {
    std::fprintf(stderr, "msadmin bt %s: %s\n", v.name, std::string(s.message()).c_str());
    if (IsUsageError(s)) {
      std::fprintf(stderr, "usage: msadmin bt --server=HOST:PORT %s\n", v.usage);
      return 2;
    }
    return 1;
  }
  return 0;
}

}  // namespace megastore::tools
