// File descriptors shared between network connections and storage.
//
// Every accepted connection (RPC, HTTP) takes a descriptor from the same
// per-process pool as the storage engine's files and the commit log. A flood
// of idle connections must not leave a flush or a compaction unable to open
// a file, so listeners take a connection's descriptor from a budget that
// always leaves `reserve` descriptors of the process's limit (RLIMIT_NOFILE)
// for everything else. A listener that finds the budget spent refuses the
// connection (closes it at once) and counts the refusal.
#pragma once

#include <cstdint>

namespace megastore {

// Raises the soft RLIMIT_NOFILE to the hard limit (what production servers
// do at start; InitProcess calls it). Returns the soft limit now in force.
uint64_t RaiseDescriptorLimit();

// Descriptors kept back from connections: by default a quarter of the soft
// limit, at least 256 (or half the limit when that is smaller).
void SetDescriptorReserve(uint64_t reserve);
uint64_t DescriptorReserve();

// Takes one connection's descriptor from the budget: false (and nothing
// taken) when the connections already hold the limit minus the reserve.
bool AcquireConnectionDescriptor();
void ReleaseConnectionDescriptor();
// Connections holding a descriptor now, and the most there may be.
uint64_t ConnectionDescriptorsInUse();
uint64_t ConnectionDescriptorLimit();

}  // namespace megastore
