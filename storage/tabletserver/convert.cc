#include "storage/tabletserver/convert.h"

#include "base/status.h"
#include "base/strings.h"

namespace megastore::storage {
namespace {

void ToProto(const ByteRange& r, ByteRangeProto* p) {
  p->set_start(r.start);
  if (r.end) p->set_end(*r.end);
  p->set_end_inclusive(r.end_inclusive);
}

ByteRange FromProto(const ByteRangeProto& p) {
  ByteRange r;
  r.start = p.start();
  if (p.has_end()) r.end = p.end();
  r.end_inclusive = p.end_inclusive();
  return r;
}

}  // namespace

void ToProto(const Mutation& m, MutationProto* p) {
  p->set_type(static_cast<MutationProto::Type>(m.type));
  p->set_family(m.family);
  p->set_qualifier(m.qualifier);
  p->set_value(m.value);
  p->set_timestamp(m.timestamp);
  p->set_start_ts(m.start_ts);
  p->set_end_ts(m.end_ts);
}

absl::StatusOr<Mutation> FromProto(const MutationProto& p) {
  if (!MutationProto::Type_IsValid(p.type())) {
    return absl::InvalidArgumentError(StrCat("unknown mutation type ", static_cast<int>(p.type())));
  }
  Mutation m;
  m.type = static_cast<Mutation::Type>(p.type());
  m.family = p.family();
  m.qualifier = p.qualifier();
  m.value = p.value();
  m.timestamp = p.timestamp();
  m.start_ts = p.start_ts();
  m.end_ts = p.end_ts();
  return m;
}

absl::StatusOr<std::vector<Mutation>> FromProto(
    const google::protobuf::RepeatedPtrField<MutationProto>& ps) {
  std::vector<Mutation> out;
  out.reserve(ps.size());
  for (const MutationProto& p : ps) {
    MS_ASSIGN_OR_RETURN(Mutation m, FromProto(p));
    out.push_back(std::move(m));
  }
  return out;
}

void ToProto(const RowFilter& f, RowFilterProto* p) {
  for (const std::string& fam : f.families) p->add_families(fam);
  p->set_qualifier_match(static_cast<RowFilterProto::QualifierMatch>(f.qualifier_match));
  p->set_qualifier(f.qualifier);
  ToProto(f.qualifier_range, p->mutable_qualifier_range());
  p->set_timestamp_start(f.timestamp_start);
  p->set_timestamp_end(f.timestamp_end);
  if (f.value_range) ToProto(*f.value_range, p->mutable_value_range());
  p->set_cells_per_column(f.cells_per_column);
  p->set_strip_value(f.strip_value);
}

absl::StatusOr<RowFilter> FromProto(const RowFilterProto& p) {
  if (!RowFilterProto::QualifierMatch_IsValid(p.qualifier_match())) {
    return absl::InvalidArgumentError(
        StrCat("unknown qualifier match ", static_cast<int>(p.qualifier_match())));
  }
  RowFilter f;
  f.families.assign(p.families().begin(), p.families().end());
  f.qualifier_match = static_cast<RowFilter::QualifierMatch>(p.qualifier_match());
  f.qualifier = p.qualifier();
  f.qualifier_range = FromProto(p.qualifier_range());
  f.timestamp_start = p.timestamp_start();
  f.timestamp_end = p.timestamp_end();
  if (p.has_value_range()) f.value_range = FromProto(p.value_range());
  f.cells_per_column = p.cells_per_column();
  f.strip_value = p.strip_value();
  return f;
}

void ToProto(const Row& r, RowProto* p) {
  p->set_key(r.key);
  for (const Cell& c : r.cells) {
    CellProto* cp = p->add_cells();
    cp->set_family(c.family);
    cp->set_qualifier(c.qualifier);
    cp->set_timestamp(c.timestamp);
    cp->set_value(c.value);
  }
}

Row FromProto(const RowProto& p) {
  Row r;
  r.key = p.key();
  for (const CellProto& c : p.cells())
    r.cells.push_back(Cell{c.family(), c.qualifier(), c.timestamp(), c.value()});
  return r;
}

void ToProto(const ReadModifyWriteRule& r, ReadModifyWriteRowRequest::Rule* p) {
  p->set_type(static_cast<ReadModifyWriteRowRequest::Rule::Type>(r.type));
  p->set_family(r.family);
  p->set_qualifier(r.qualifier);
  p->set_append_value(r.append_value);
  p->set_increment(r.increment);
}

absl::StatusOr<ReadModifyWriteRule> FromProto(const ReadModifyWriteRowRequest::Rule& p) {
  if (!ReadModifyWriteRowRequest::Rule::Type_IsValid(p.type())) {
    return absl::InvalidArgumentError(StrCat("unknown rule type ", static_cast<int>(p.type())));
  }
  ReadModifyWriteRule r;
  r.type = static_cast<ReadModifyWriteRule::Type>(p.type());
  r.family = p.family();
  r.qualifier = p.qualifier();
  r.append_value = p.append_value();
  r.increment = p.increment();
  return r;
}

void ToProto(const absl::Status& s, StatusProto* p) {
  p->set_code(static_cast<int32_t>(s.code()));
  p->set_message(std::string(s.message()));
}

absl::Status FromProto(const StatusProto& p) {
  if (p.code() < 0 || p.code() > 16)
    return absl::InternalError(StrCat("unknown status code ", p.code()));
  return absl::Status(static_cast<absl::StatusCode>(p.code()), p.message());
}

ReadRowsRequest ToReadRowsRequest(const std::string& table, const RowSet& rows,
                                  const ReadOptions& options) {
  ReadRowsRequest r;
  r.set_table(table);
  for (const std::string& k : rows.keys) r.add_keys(k);
  for (const RowRange& range : rows.ranges) {
    RowRangeProto* p = r.add_ranges();
    p->set_start(range.start);
    p->set_end(range.end);
  }
  ToProto(options.filter, r.mutable_filter());
  if (options.read_timestamp != kMaxTimestamp) r.set_read_timestamp(options.read_timestamp);
  r.set_rows_limit(options.rows_limit);
  return r;
}

}  // namespace megastore::storage
