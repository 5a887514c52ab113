"""Histories of client operations, read from JSON lines.

The campaign's checker shares no code with the system it checks: this
module defines its own history format (docs/campaign.md, "Histories").
Each line is one event of one client process:

    {"process": 3, "type": "invoke", "f": "write", "key": "k1", "value": 7, "time": 1200}
    {"process": 3, "type": "ok",     "f": "write", "key": "k1", "value": 7, "time": 4100}

`type` is "invoke" for the start of an operation, and then, from the same
process, "ok" (it took effect), "fail" (it certainly did not) or "info"
(unknown: it may have taken effect, at any time after its invocation; the
process issues nothing more). A process has at most one operation
outstanding. `time` is an integer (nanoseconds on one clock: the runner's),
never decreasing along the file.

Every field is checked, and bounded, before it is used: a malformed line is
a HistoryError naming the line and what is wrong with it.
"""

import json
import math

# Bounds on what one history may hold.
MAX_LINE_BYTES = 1 << 20
MAX_EVENTS = 20_000_000


class HistoryError(Exception):
    """A history that is not well formed (the message names the line)."""


class Anomaly:
    """What a model's check found: its kind, a message, the operations."""

    def __init__(self, kind, message, ops=()):
        self.kind = kind
        self.message = message
        self.txns = list(ops)

    def __repr__(self):
        return f"{self.kind}: {self.message}"


class Op:
    """One operation: its invocation and completion, paired."""

    __slots__ = ("index", "process", "f", "key", "invoke_value", "value", "type", "invoke",
                 "complete", "line", "complete_line")

    def __init__(self, index, process, f, key, invoke_value, invoke, line):
        self.index = index
        self.process = process
        self.f = f
        self.key = key
        self.invoke_value = invoke_value
        self.value = invoke_value  # the completion's value once it comes
        self.type = None  # "ok", "fail" or "info"; None while outstanding
        self.invoke = invoke
        self.complete = math.inf  # unknown outcomes never complete
        self.line = line  # the invocation's line
        self.complete_line = None  # the completion's line, once it comes

    def __repr__(self):
        return (f"Op(#{self.index} line {self.line} process {self.process} {self.f} "
                f"key={self.key!r} value={self.value!r} {self.type} "
                f"[{self.invoke}, {self.complete}])")


def _refuse_constant(name):
    raise ValueError(f"{name} is not a number a history may hold")


def _finite(text):
    v = float(text)
    if math.isinf(v):
        raise ValueError(f"{text} is out of range")
    return v


def _field(event, name, kinds, lineno, required=True):
    if name not in event:
        if required:
            raise HistoryError(f"line {lineno}: no \"{name}\" field")
        return None
    v = event[name]
    if not isinstance(v, kinds) or isinstance(v, bool) and bool not in kinds:
        raise HistoryError(f"line {lineno}: \"{name}\" is {type(v).__name__}, "
                           f"expected {' or '.join(k.__name__ for k in kinds)}")
    return v


def parse_lines(lines):
    """Pairs the events of `lines` (an iterable of str) into Ops, in
    invocation order. Operations still outstanding at the end are unknown
    ("info"): a run that stopped before they answered."""
    ops = []
    outstanding = {}  # process -> Op
    retired = set()  # processes that had an unknown outcome
    last_time = None
    for lineno, line in enumerate(lines, 1):
        if len(line) > MAX_LINE_BYTES:
            raise HistoryError(f"line {lineno}: longer than {MAX_LINE_BYTES} bytes")
        line = line.strip()
        if not line:
            continue
        if lineno > MAX_EVENTS:
            raise HistoryError(f"line {lineno}: more than {MAX_EVENTS} events")
        try:
            event = json.loads(line, parse_constant=_refuse_constant, parse_float=_finite)
        except ValueError as e:
            raise HistoryError(f"line {lineno}: not JSON ({e})") from None
        except RecursionError:
            raise HistoryError(f"line {lineno}: nested too deeply") from None
        if not isinstance(event, dict):
            raise HistoryError(f"line {lineno}: not a JSON object")
        process = _field(event, "process", (int,), lineno)
        kind = _field(event, "type", (str,), lineno)
        f = _field(event, "f", (str,), lineno)
        time = _field(event, "time", (int,), lineno)
        key = _field(event, "key", (str, int), lineno, required=False)
        value = event.get("value")
        if kind not in ("invoke", "ok", "fail", "info"):
            raise HistoryError(f"line {lineno}: type {kind!r} is none of invoke, ok, fail, info")
        if last_time is not None and time < last_time:
            raise HistoryError(f"line {lineno}: time {time} is before the previous line's "
                               f"{last_time}")
        last_time = time
        if kind == "invoke":
            if process in outstanding:
                raise HistoryError(f"line {lineno}: process {process} invokes while its "
                                   f"operation of line {outstanding[process].line} is "
                                   f"outstanding")
            if process in retired:
                raise HistoryError(f"line {lineno}: process {process} invokes after an "
                                   f"unknown outcome (use a new process id)")
            op = Op(len(ops), process, f, key, value, time, lineno)
            ops.append(op)
            outstanding[process] = op
            continue
        op = outstanding.pop(process, None)
        if op is None:
            raise HistoryError(f"line {lineno}: process {process} completes an operation "
                               f"it never invoked")
        if f != op.f or key != op.key:
            raise HistoryError(f"line {lineno}: completes {f} {key!r}, but process "
                               f"{process} invoked {op.f} {op.key!r} (line {op.line})")
        op.type = kind
        op.complete_line = lineno
        if kind == "info":
            retired.add(process)
        else:
            op.complete = time
            op.value = value
    for op in outstanding.values():
        op.type = "info"
    return ops


def read_file(path):
    with open(path, encoding="utf-8", errors="strict") as f:
        return parse_lines(f)
