"""Queues: every message delivered exactly once.

Operations: f "enqueue" (value: the message's id, a string or integer,
unique in the history) and f "dequeue" (the ok value: the list of ids
received; empty when nothing was waiting). Megastore's queues deliver
asynchronously, so a message may arrive any time after its enqueue
committed; but never twice, never one nobody sent, never one whose
enqueue failed. With `drained` (the runner kept dequeuing after the last
fault until the queues stayed empty), every committed message must have
been delivered; an unknown enqueue may or may not have been.
"""

import collections

from history import Anomaly


def _id_ok(x):
    return isinstance(x, (str, int)) and not isinstance(x, bool)


def check(ops, drained=False):
    anomalies = []
    sent = {}  # id -> enqueue op
    delivered = collections.defaultdict(list)  # id -> dequeue ops
    for o in ops:
        if o.f == "enqueue":
            if not _id_ok(o.invoke_value):
                raise ValueError(f"line {o.line}: a message id is a string or an integer")
            if o.invoke_value in sent:
                raise ValueError(f"line {o.line}: message {o.invoke_value!r} is enqueued twice "
                                 f"(ids must be unique)")
            sent[o.invoke_value] = o
        elif o.f == "dequeue":
            if o.type != "ok":
                continue
            if not isinstance(o.value, list) or not all(_id_ok(x) for x in o.value):
                raise ValueError(f"line {o.complete_line}: a dequeue's value is the list of message ids "
                                 f"received")
            for x in o.value:
                delivered[x].append(o)
        else:
            raise ValueError(f"line {o.line}: a queue operation is an enqueue or a dequeue, "
                             f"not {o.f!r}")
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
    if drained:
        lost = [e for x, e in sent.items() if e.type == "ok" and x not in delivered]
        if lost:
            anomalies.append(Anomaly("lost-message", f"{len(lost)} committed messages never "
                                     f"delivered, e.g. {lost[0].invoke_value!r}", lost[:2]))
    return anomalies
