#!/usr/bin/env python3
"""Splits a perf profile of msbench txn by the request each sample served.

Usage:
  perf record -F 499 --call-graph dwarf,16384 -o perf.data -- \
      build/bin/msbench txn --wan=none --replicas=full,full,full --sync \
      --groups=10000 --clients=64 --runs=1 --seconds=8
  perf script -i perf.data -F comm,ip,sym > perf.txt
  tools/perf/by_request.py perf.txt

Each sample is given to the outermost frame of its stack that names a kind
of work (a replication request, the commit log's writer, an in-process
answer being delivered, ...): continuations run inside the callbacks of
earlier steps, so the outermost frame is the request that started the
chain. Within each kind the sample's innermost frame says what the CPU did
(kernel scheduling, malloc, RocksDB, ...). Samples taken while the
benchmark preloaded its groups are left out.
"""
import collections
import re
import sys

# (name, pattern): the first pattern that matches a frame, walking from the
# thread's root towards the leaf, names the sample's request.
REQUESTS = [
    ("flush and compaction", r"BackgroundFlush|BackgroundCompaction|BGWork"),
    ("commit-log writer", r"CommitLog::WriterLoop"),
    ("repl.Paxos (accepts)", r"LogReplica::Paxos\b"),
    ("repl.Apply", r"LogReplica::Apply\b|LogReplica::ApplySealed"),
    ("repl.Read", r"LogReplica::Read\b|LogReplica::ReadAt|LogReplica::ScanSealed"),
    ("repl.State (log state)", r"LogReplica::State\b"),
    ("coordinator", r"coordinator::"),
    ("client transaction", r"Bench::Transact|Transaction::|Database::Run"),
    ("delivering in-process answers", r"LocalCall::Complete|HeldAnswers|RpcTransport::Call|CallInProcess"),
]
# (name, pattern): the first that matches the leaf frame, or failing that
# the next frames up, names what the CPU did.
WORK = [
    ("fdatasync", r"fdatasync|fsync"),
    ("scheduling and wake-ups", r"futex|schedule|try_to_wake|wake_up|finish_task_switch"),
    ("malloc/free", r"malloc|free\b|cfree|operator new|operator delete|_int_|tcache"),
    ("RocksDB writes", r"DBImpl::Write|MemTable::Add|InlineSkipList.*Insert|WriteBatch"),
    ("RocksDB reads", r"DBIter|Seek|MemTableIterator|BlockBased|MergingIterator|FindGreaterOrEqual"),
    ("zstd", r"ZDICT|ZSTD"),
    ("protobuf", r"protobuf"),
    ("commit-log writes", r"CommitLog|__libc_write|vfs_write|ext4"),
    ("absl::Mutex", r"absl.*Mutex"),
]


def samples(path):
    comm, frames = None, []
    with open(path, errors="replace") as f:
        for line in f:
            if not line.strip():
                if comm is not None:
                    yield comm, frames
                comm, frames = None, []
            elif not line.startswith("\t"):
                comm, frames = line.split()[0] if line.split() else "?", []
            else:
                parts = line.strip().split(" ", 1)
                if len(parts) > 1:
                    frames.append(parts[1])
    if comm is not None:
        yield comm, frames


def classify(frames, rules, root_first):
    for frame in reversed(frames) if root_first else frames:
        for name, pattern in rules:
            if re.search(pattern, frame):
                return name
    return None


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: by_request.py PERF_SCRIPT_OUTPUT (perf script -F comm,ip,sym)")
    table = collections.Counter()
    per_request = collections.Counter()
    per_work = collections.Counter()
    total = 0
    for comm, frames in samples(sys.argv[1]):
        if any("Bench::Preload" in f for f in frames):
            continue
        request = classify(frames, REQUESTS, True) or f"other ({comm})"
        work = classify(frames, WORK, False) or "other"
        table[(request, work)] += 1
        per_request[request] += 1
        per_work[work] += 1
        total += 1
    if total == 0:
        sys.exit("no samples outside the preload")
    works = [w for w, _ in per_work.most_common()]
    print(f"{total} samples outside the preload; shares of all of them")
    print("| request | share | " + " | ".join(works) + " |")
    print("|---|---|" + "---|" * len(works))
    for request, n in per_request.most_common():
        cells = [f"{100 * table[(request, w)] / total:.1f}" for w in works]
        print(f"| {request} | {100 * n / total:.1f} | " + " | ".join(cells) + " |")
    print("| all | 100 | " + " | ".join(f"{100 * per_work[w] / total:.1f}" for w in works) + " |")


if __name__ == "__main__":
    main()
