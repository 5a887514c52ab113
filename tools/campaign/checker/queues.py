"""Queues: every message delivered exactly once.

Operations: f "enqueue" (value: the message's id, a string or integer,
unique in the history) and f "dequeue" (the ok value: the list of ids
received; empty when nothing was waiting). Megastore's queues deliver
asynchronously, so a message may arrive any time after its enqueue
committed; but never twice, never one nobody sent, never one whose
enqueue failed. With `drained` (the runner kept dequeuing after the last
fault until the queues stayed empty), every committed message must have
been delivered; an unknown enqueue may or may not have been.

Receipts settle dequeues of unknown outcome. A dequeue whose invoke value
is an id (a string) wrote a receipt under that id, atomically with
consuming its messages; f "receipts" operations (the ok value maps
dequeue ids to the message ids their receipts list; read once every
dequeue had finished) are the receipts of every dequeue that took
effect. With receipts: an unknown dequeue that has one delivered its
messages; an ok dequeue must have one listing what it returned; a failed
one must have none; and every receipt is a dequeue's. f "settle" (a commit
in a sender's group at the end, sending nothing checked) is allowed.
"""

import collections

from history import Anomaly


def _id_ok(x):
    return isinstance(x, (str, int)) and not isinstance(x, bool)


def _receipts(ops):
    """Every receipt the receipts operations read: dequeue id -> message ids
    (None if there were no receipts operations)."""
    found = None
    for o in ops:
        if o.f != "receipts" or o.type != "ok":
            continue
        if not isinstance(o.value, dict) or not all(
                isinstance(v, list) and all(_id_ok(x) for x in v) for v in o.value.values()):
            raise ValueError(f"line {o.complete_line}: a receipts value maps dequeue ids to "
                             f"lists of message ids")
        found = found if found is not None else {}
        found.update(o.value)
    return found


def _settle(o, receipts, anomalies):
    """The messages dequeue `o` delivered, as far as the history shows."""
    cid = o.invoke_value
    if receipts is None or not isinstance(cid, str):
        return o.value if o.type == "ok" else []
    receipt = receipts.get(cid)
    if o.type == "fail":
        if receipt is not None:
            anomalies.append(Anomaly("aborted-dequeue-visible", f"dequeue {cid!r} failed, but "
                                     f"its receipt exists", [o]))
        return receipt or []
    if o.type == "ok" and o.value and receipt is None:
        anomalies.append(Anomaly("lost-receipt", f"dequeue {cid!r} succeeded with "
                                 f"{len(o.value)} messages, but its receipt is gone", [o]))
        return o.value
    if o.type == "ok" and receipt is not None and sorted(map(str, receipt)) != sorted(
            map(str, o.value)):
        anomalies.append(Anomaly("receipt-mismatch", f"dequeue {cid!r} returned {o.value}, its "
                                 f"receipt lists {receipt}", [o]))
    return receipt if receipt is not None else []


def check(ops, drained=False):
    anomalies = []
    sent = {}  # id -> enqueue op
    delivered = collections.defaultdict(list)  # id -> dequeue ops
    receipts = _receipts(ops)
    for o in ops:
        if o.f == "enqueue":
            if not _id_ok(o.invoke_value):
                raise ValueError(f"line {o.line}: a message id is a string or an integer")
            if o.invoke_value in sent:
                raise ValueError(f"line {o.line}: message {o.invoke_value!r} is enqueued twice "
                                 f"(ids must be unique)")
            sent[o.invoke_value] = o
        elif o.f == "dequeue":
            if o.type == "ok" and (not isinstance(o.value, list) or
                                   not all(_id_ok(x) for x in o.value)):
                raise ValueError(f"line {o.complete_line}: a dequeue's value is the list of message ids "
                                 f"received")
            for x in _settle(o, receipts, anomalies):
                delivered[x].append(o)
        elif o.f in ("receipts", "settle"):
            continue  # settle: a commit in a sender's group, sending nothing checked
        else:
            raise ValueError(f"line {o.line}: a queue operation is an enqueue, a dequeue or "
                             f"receipts, not {o.f!r}")
    for x, ds in delivered.items():
        e = sent.get(x)
        if len(ds) > 1:
            anomalies.append(Anomaly("duplicate-delivery", f"message {x!r} delivered "
                                     f"{len(ds)} times", ds[:2]))
        if e is None:
            anomalies.append(Anomaly("phantom-delivery", f"message {x!r} delivered but never "
                                     f"enqueued", ds[:1]))
        elif e.type == "fail":
            anomalies.append(Anomaly("aborted-delivery", f"message {x!r} delivered though its "
                                     f"enqueue failed", [e, ds[0]]))
        elif ds[0].complete < e.invoke:
            anomalies.append(Anomaly("early-delivery", f"message {x!r} delivered before it was "
                                     f"enqueued", [e, ds[0]]))
    if receipts is not None:
        dequeues = {o.invoke_value for o in ops if o.f == "dequeue"}
        stray = sorted(set(receipts) - dequeues)
        if stray:
            anomalies.append(Anomaly("phantom-receipt", f"{len(stray)} receipts of no dequeue, "
                                     f"e.g. {stray[0]!r}", []))
    if drained:
        lost = [e for x, e in sent.items() if e.type == "ok" and x not in delivered]
        if lost:
            anomalies.append(Anomaly("lost-message", f"{len(lost)} committed messages never "
                                     f"delivered, e.g. {lost[0].invoke_value!r}", lost[:2]))
    return anomalies
