// Where schemas applied to the cluster are kept, in every datacenter's
// Bigtable: one row per schema name, cell s:descriptor (a serialized
// schema::SchemaDescriptor). megastored and msadmin write it; replicas read
// it to learn which tables are encrypted.
#pragma once

namespace megastore::replication {

inline constexpr char kSchemaTable[] = "megastore.schemas";
inline constexpr char kSchemaFamily[] = "s";
inline constexpr char kSchemaColumn[] = "descriptor";

}  // namespace megastore::replication
