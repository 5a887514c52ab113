"""Register reads at the snapshot and inconsistent levels.

They are not linearizable: a snapshot read sees its replica's last fully
applied state, an inconsistent read the newest data its replica holds,
either of which may lag the latest commit. What they must still be:

  * a value some write wrote (or None, the value before any write), never
    one of a write that failed (`weak-read-phantom`, `weak-read-aborted`);
  * never from the future: the write began before the read finished
    (`weak-read-from-future`);
  * monotonic for one client at one level: the runner has a client's weak
    reads served by one replica, whose applied state (snapshot) and newest
    data (inconsistent) each only move forward, so a later read at a level
    never shows a value older than an earlier read at that level did —
    older meaning written by a write that finished before the other's
    began, or None after a value (`weak-read-regressed`). The two levels
    are not compared with each other: an inconsistent read may see data a
    later snapshot read does not, until the replica records it applied.

Operations: f "write" (invoke value: the value) as for the register
model; f "read-snapshot" and f "read-inconsistent" (ok value: the value
read). A client is a history process; the runner keeps one client on one
gateway, whose reads are served by its own datacenter's replica.
"""

import json

from history import Anomaly

WEAK_READS = ("read-snapshot", "read-inconsistent")


def _tag(v):
    """A value as compared: its JSON text (true is not 1, 1 is not 1.0)."""
    return json.dumps(v, sort_keys=True)


def check(ops):
    anomalies = []
    writes = {}  # (key, value tag) -> write op
    for o in ops:
        if o.f == "write":
            writes.setdefault((repr(o.key), _tag(o.invoke_value)), o)
    last = {}  # (process, key, level) -> (read, its write or None)
    reads = sorted((o for o in ops if o.f in WEAK_READS and o.type == "ok"),
                   key=lambda o: o.invoke)
    for o in reads:
        w = None
        if o.value is not None:
            w = writes.get((repr(o.key), _tag(o.value)))
            if w is None:
                anomalies.append(Anomaly("weak-read-phantom", f"a {o.f} of {o.key!r} read "
                                         f"{o.value!r}, which nobody wrote", [o]))
                continue
            if w.type == "fail":
                anomalies.append(Anomaly("weak-read-aborted", f"a {o.f} of {o.key!r} read "
                                         f"{o.value!r}, whose write failed", [w, o]))
            if w.invoke > o.complete:
                anomalies.append(Anomaly("weak-read-from-future", f"a {o.f} of {o.key!r} read "
                                         f"{o.value!r} before its write began", [o, w]))
        prev = last.get((o.process, repr(o.key), o.f))
        if prev is not None:
            before, before_write = prev
            if before_write is not None and (
                    w is None or w.complete < before_write.invoke):
                anomalies.append(Anomaly("weak-read-regressed", f"process {o.process} read "
                                         f"{before.value!r} of {o.key!r}, then the older "
                                         f"{o.value!r}", [before, o]))
        last[(o.process, repr(o.key), o.f)] = (o, w)
    return anomalies
