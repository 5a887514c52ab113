"""Transactional anomalies in list-append histories (after Elle: Kingsbury
and Alvaro, "Elle: Inferring Isolation Anomalies from Experimental
Observations", VLDB 2020).

A transaction (f "txn") is a list of micro-operations on lists named by
keys: ["append", key, value] appends `value` (unique per key across the
whole history) and ["r", key, null] reads the list, whose value the "ok"
completion carries: ["r", key, [v1, v2, ...]]. Because every value is
appended once, each read reveals a prefix of the key's version order, and
the order of the appends before it.

Checks, for committed ("ok") transactions, and for unknown ("info") ones
as far as their appends were observed:
  * incompatible-order: two reads of a key, neither a prefix of the other;
  * duplicate-elements: a value twice in one read;
  * garbage-read: a value read that no transaction appended;
  * G1a (aborted read): a value appended by a failed transaction read;
  * G1b (intermediate read): a read ending in a value its transaction
    appended to that key before another;
  * internal: a transaction's read disagreeing with its own earlier appends
    and reads of that key;
  * lost-append: a committed append that no read ever shows although some
    read of the key began after the append's transaction completed;
  * dependency cycles (Adya's G0, G1c, G2): write-write (ww), write-read (wr)
    and read-write anti-dependency (rw) edges between transactions, found by
    Tarjan's algorithm; with real-time edges too (a transaction that
    completed before another was invoked precedes it), cycles that break
    strict serializability only.
"""

import bisect
import collections

from history import Anomaly


def _micro_ops(op, value, lineno):
    if not isinstance(value, list):
        raise ValueError(f"line {lineno}: a txn's value is a list of micro-operations")
    out = []
    for m in value:
        if (not isinstance(m, list) or len(m) != 3 or m[0] not in ("append", "r") or
                not isinstance(m[1], (str, int)) or isinstance(m[1], bool)):
            raise ValueError(f"line {lineno}: micro-operation {m!r} is not [\"append\"|\"r\", "
                             f"key, value]")
        if m[0] == "append" and (not isinstance(m[2], int) or isinstance(m[2], bool)):
            raise ValueError(f"line {lineno}: appended value {m[2]!r} is not an integer")
        if m[0] == "r" and m[2] is not None and (
                not isinstance(m[2], list) or
                any(not isinstance(x, int) or isinstance(x, bool) for x in m[2])):
            raise ValueError(f"line {lineno}: read value {m[2]!r} is not a list of integers")
        out.append((m[0], m[1], m[2]))
    return out


class _Txn:
    __slots__ = ("op", "mops", "status")

    def __init__(self, op, mops):
        self.op = op
        self.mops = mops
        self.status = op.type  # ok, fail, info

    def __repr__(self):
        return (f"txn of process {self.op.process} (line {self.op.line}, {self.status}, "
                f"[{self.op.invoke}, {self.op.complete}]) {self.mops}")


def check(ops, realtime=True):
    """Returns a list of Anomaly (empty: none found). `realtime`: also look
    for lost appends and cycles through real-time order (strict
    serializability). A history whose transactions are not well formed
    (micro-operations, a value appended twice) raises ValueError."""
    txns = []
    for o in ops:
        if o.f != "txn":
            raise ValueError(f"line {o.line}: a list-append operation is a txn, not {o.f!r}")
        invoked = _micro_ops(o, o.invoke_value, o.line)
        mops = invoked
        if o.type == "ok":
            mops = _micro_ops(o, o.value, o.complete_line)
            if [(f, k) for f, k, _ in invoked] != [(f, k) for f, k, _ in mops]:
                raise ValueError(f"line {o.complete_line}: the completion's micro-operations "
                                 f"differ from the invocation's (line {o.line})")
            for (f, k, v), (_, _, w) in zip(invoked, mops):
                if f == "append" and v != w:
                    raise ValueError(f"line {o.complete_line}: the completion appends {w} to "
                                     f"key {k!r}, the invocation {v} (line {o.line})")
        txns.append(_Txn(o, mops))
    anomalies = []

    # Who appended what. Values are unique per key by the workload's
    # contract: a value appended twice makes every inference unsound.
    writer = {}  # (key, value) -> txn index
    for t, txn in enumerate(txns):
        for f, k, v in txn.mops:
            if f == "append":
                if (k, v) in writer:
                    raise ValueError(f"line {txn.op.line}: value {v} is appended to key {k!r} "
                                     f"again (first on line {txns[writer[(k, v)]].op.line}); "
                                     f"values must be unique per key")
                writer[(k, v)] = t

    # Reads: the committed ones reveal the version order.
    reads = collections.defaultdict(list)  # key -> [(txn index, list)]
    for t, txn in enumerate(txns):
        if txn.status != "ok":
            continue
        for f, k, v in txn.mops:
            if f == "r" and v is not None:
                reads[k].append((t, v))
    order = {}  # key -> the longest read (the version order as far as observed)
    for k, rs in reads.items():
        longest = max((v for _, v in rs), key=len)
        order[k] = longest
        for t, v in rs:
            if len(set(v)) != len(v):
                anomalies.append(Anomaly("duplicate-elements", f"a read of key {k!r} shows "
                                         f"a value twice: {v}", [txns[t]]))
            if longest[:len(v)] != v:
                anomalies.append(Anomaly("incompatible-order", f"reads of key {k!r} disagree: "
                                         f"{v} is not a prefix of {longest}", [txns[t]]))
        first_reader = None
        for v in longest:
            w = writer.get((k, v))
            if w is None:
                anomalies.append(Anomaly("garbage-read", f"key {k!r} shows {v}, which no "
                                         f"transaction appended"))
            elif txns[w].status == "fail":
                if first_reader is None:
                    first_reader = {}
                    for t, r in rs:
                        for x in r:
                            first_reader.setdefault(x, t)
                anomalies.append(Anomaly("G1a", f"key {k!r} shows {v}, appended by a "
                                         f"transaction that failed",
                                         [txns[w], txns[first_reader[v]]]))

    # Intermediate reads, and reads that contradict the transaction's own writes.
    appends_of = collections.defaultdict(list)  # (txn index, key) -> its appends, in order
    for t, txn in enumerate(txns):
        for f, k, v in txn.mops:
            if f == "append":
                appends_of[(t, k)].append(v)
    for t, txn in enumerate(txns):
        if txn.status != "ok":
            continue
        mine = collections.defaultdict(list)  # key -> this txn's appends so far
        last_read = {}
        for f, k, v in txn.mops:
            if f == "append":
                mine[k].append(v)
                continue
            if v is None:
                continue
            if k in last_read and v[:len(last_read[k])] != last_read[k]:
                anomalies.append(Anomaly("internal", f"a read of key {k!r} ({v}) does not extend "
                                         f"the transaction's earlier read {last_read[k]}", [txn]))
            if mine[k] and v[-len(mine[k]):] != mine[k]:
                anomalies.append(Anomaly("internal", f"a read of key {k!r} ({v}) does not end in "
                                         f"the transaction's own appends {mine[k]}", [txn]))
            last_read[k] = v
        # A read showing some, not all, of another transaction's appends to
        # a key saw it half done.
        for f, k, v in txn.mops:
            if f != "r" or not v:
                continue
            shown = set(v)
            for w in {writer.get((k, x)) for x in v}:
                if w is None or w == t:
                    continue
                missing = [x for x in appends_of[(w, k)] if x not in shown]
                if missing:
                    anomalies.append(Anomaly("G1b", f"key {k!r} read as {v}, with some of "
                                             f"another transaction's appends but not "
                                             f"{missing}", [txns[w], txn]))

    # The transactions that took effect: committed ones, and unknown ones
    # whose appends some committed read shows. An unknown one took effect
    # before the first read showing it completed.
    effective = {t: txn.op.complete for t, txn in enumerate(txns) if txn.status == "ok"}
    for k, rs in reads.items():
        for t, v in rs:
            for x in v:
                w = writer.get((k, x))
                if w is not None and txns[w].status == "info":
                    effective[w] = min(effective.get(w, float("inf")), txns[t].op.complete)

    # Lost appends: took effect, never seen, though a read began after.
    seen = {(k, x) for k, rs in reads.items() for _, v in rs for x in v}
    if realtime:
        for (k, v), w in writer.items():
            if w not in effective or (k, v) in seen:
                continue
            later = [txns[t] for t, _ in reads.get(k, ()) if txns[t].op.invoke > effective[w]]
            if later:
                anomalies.append(Anomaly("lost-append", f"value {v} appended to key {k!r} by a "
                                         f"transaction that took effect is in no read, though "
                                         f"{len(later)} began after it", [txns[w], later[0]]))

    anomalies += _cycles(txns, writer, order, reads, effective, seen, realtime)
    return anomalies


def _cycles(txns, writer, order, reads, effective, seen, realtime):
    """Dependency graph of the transactions that took effect; cycles,
    serializability first."""
    edges = collections.defaultdict(dict)  # from -> {to: kind}

    def add(a, b, kind):
        if a != b and kind not in edges[a].get(b, ""):
            edges[a][b] = edges[a].get(b, "") + kind + " "

    # Appends that took effect but no read shows: they follow every version
    # any read shows, and every read precedes them.
    unseen = collections.defaultdict(list)  # key -> [txn index]
    for (k, v), w in writer.items():
        if w in effective and (k, v) not in seen:
            unseen[k].append(w)
    for k, versions in order.items():
        ws = [writer.get((k, v)) for v in versions]
        for a, b in zip(ws, ws[1:]):
            if a is not None and b is not None:
                add(a, b, "ww")
        if ws and ws[-1] is not None:
            for b in unseen[k]:
                add(ws[-1], b, "ww")
        for t, v in reads[k]:
            if v:
                w = writer.get((k, v[-1]))
                if w is not None:
                    add(w, t, "wr")
            if len(v) < len(versions):
                nxt = writer.get((k, versions[len(v)]))
                if nxt is not None:
                    add(t, nxt, "rw")
            for b in unseen[k]:
                add(t, b, "rw")
    done_by = effective  # txn index -> when it had surely taken effect
    effective = set(effective)
    out = []
    cycle = _find_cycle(effective, edges)
    if cycle:
        out.append(_describe(cycle, edges, txns, realtime=False))
    elif realtime:
        # Real time as a chain of completion points: t -> its completion
        # point; point i -> point i+1; the last point before t's invocation
        # -> t. Then a path t1 ~> t2 exists iff t1 completed before t2 began.
        nodes = sorted((done_by[t], t) for t in effective if done_by[t] != float("inf"))
        times = [c for c, _ in nodes]
        rt = collections.defaultdict(dict)
        for a, bs in edges.items():
            rt[a] = dict(bs)
        for i, (_, t) in enumerate(nodes):
            rt[t][("rt", i)] = "rt "
            if i + 1 < len(nodes):
                rt[("rt", i)][("rt", i + 1)] = "rt "
        for t in effective:
            j = bisect.bisect_left(times, txns[t].op.invoke) - 1
            if j >= 0:
                rt[("rt", j)][t] = "rt "
        all_nodes = set(effective) | {("rt", i) for i in range(len(nodes))}
        cycle = _find_cycle(all_nodes, rt)
        if cycle:
            out.append(_describe(cycle, rt, txns, realtime=True))
    return out


def _find_cycle(nodes, edges):
    """A cycle (list of nodes) among `nodes`, or None: Tarjan's strongly
    connected components, iteratively, then a path around one."""
    index = {}
    low = {}
    on_stack = set()
    stack = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(edges.get(root, {})))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in nodes:
                    continue
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(edges.get(w, {}))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    return _cycle_in(set(component), edges)
    return None


def _cycle_in(component, edges):
    """A shortest cycle through the first node of a strongly connected
    component (breadth-first back to it)."""
    start = next(iter(sorted(component, key=repr)))
    parent = {start: None}
    queue = collections.deque([start])
    while queue:
        v = queue.popleft()
        for w in edges.get(v, {}):
            if w not in component:
                continue
            if w == start:
                path = [v]
                while parent[path[-1]] is not None:
                    path.append(parent[path[-1]])
                return list(reversed(path))
            if w not in parent:
                parent[w] = v
                queue.append(w)
    return None


def _describe(cycle, edges, txns, realtime):
    kinds = []
    for a, b in zip(cycle, cycle[1:] + cycle[:1]):
        kinds.extend(edges[a][b].split())
    dependency = [k for k in kinds if k != "rt"]
    if realtime and "rt" in kinds:
        kind = "strict-serializability"
    elif dependency.count("rw") == 1:
        kind = "G-single"
    elif "rw" in dependency:
        kind = "G2"
    elif "wr" in dependency:
        kind = "G1c"
    else:
        kind = "G0"
    members = [txns[v] for v in cycle if not isinstance(v, tuple)]
    steps = " -> ".join(
        ("rt" if isinstance(a, tuple) else f"T{a}") + f" [{edges[a][b].strip()}]"
        for a, b in zip(cycle, cycle[1:] + cycle[:1]))
    return Anomaly(kind, f"a cycle of {len(members)} transactions: {steps} -> back", members)
