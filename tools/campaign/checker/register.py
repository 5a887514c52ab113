"""Linearizability of read/write registers (Wing & Gong's search, with
Lowe's memoization), one key at a time (linearizability is compositional).

Operations: f "write" (invoke value: the value written) and f "read" (ok
value: the value read; None for a key never written). Every key starts
unwritten (None). A "fail" operation did not happen and is left out. An
"info" write may have happened, at any point after its invocation, or not
at all; an "info" read tells nothing and is left out.

The search places operations one at a time in an order consistent with
real time: the next may be any operation not placed yet that was invoked
before every unplaced "ok" operation completed. A read placed must return
the register's value at that point. A history is linearizable if every "ok"
operation can be placed. Explored states (set of placed operations, value)
are remembered, so each is visited once; a search that would visit more
than `budget` states stops and says so rather than guess.
"""

import json
import math


def _tag(v):
    """A value as the register compares it: its JSON text, so that true and
    1, 1 and 1.0, or a list and a string holding its JSON differ."""
    return json.dumps(v, sort_keys=True)


class Result:
    def __init__(self, valid, key=None, reason="", ops=()):
        self.valid = valid  # True, False, or None (unknown: the budget ran out)
        self.key = key
        self.reason = reason
        self.ops = list(ops)

    def __repr__(self):
        return f"Result(valid={self.valid}, key={self.key!r}, reason={self.reason!r})"


def _order(node):
    """The operations placed along a search path (a chain of (i, parent))."""
    out = []
    while node is not None:
        out.append(node[0])
        node = node[1]
    return tuple(reversed(out))


def _check_key(ops, budget):
    """ops: one key's operations (ok reads and writes, info writes), sorted
    by invocation. Returns (valid, placed_most, states) where placed_most is
    the longest order placed when invalid."""
    n = len(ops)
    written = [_tag(o.invoke_value) for o in ops]
    read = [_tag(o.value) for o in ops]
    required = 0
    for i, o in enumerate(ops):
        if o.type == "ok":
            required |= 1 << i
    # The ok operations by completion: the horizon (earliest completion of
    # an unplaced ok operation) is the first unplaced one along this list.
    by_complete = sorted((i for i in range(n) if ops[i].type == "ok"),
                         key=lambda i: ops[i].complete)
    # Depth-first search over (placed bitmask, value); iterative. A state
    # carries where its horizon and its first unplaced operation are, both
    # only moving forward as operations are placed, and its path as a
    # parent chain (not a copied tuple).
    seen = set()
    initial = _tag(None)
    stack = [(0, initial, 0, 0, None, 0)]
    best, best_depth = None, 0
    states = 0
    while stack:
        placed, value, h, lo, path, depth = stack.pop()
        if placed & required == required:
            return True, _order(path), states
        if (placed, value) in seen:
            continue
        seen.add((placed, value))
        states += 1
        if states > budget:
            return None, _order(best), states
        if depth > best_depth:
            best, best_depth = path, depth
        while h < len(by_complete) and placed >> by_complete[h] & 1:
            h += 1
        horizon = ops[by_complete[h]].complete if h < len(by_complete) else math.inf
        while lo < n and placed >> lo & 1:
            lo += 1
        for i in range(lo, n):
            if placed >> i & 1:
                continue
            o = ops[i]
            if o.invoke > horizon:
                break  # sorted by invocation: none after it either
            if o.f == "write":
                stack.append((placed | 1 << i, written[i], h, lo, (i, path), depth + 1))
            elif read[i] == value:
                stack.append((placed | 1 << i, value, h, lo, (i, path), depth + 1))
    return False, _order(best), states


class _Known:
    """An unknown write that some read saw: it happened, before the first
    such read completed — an ok write over [invoke, that completion]."""

    def __init__(self, op, complete):
        self.op = op
        self.f = "write"
        self.type = "ok"
        self.invoke = op.invoke
        self.complete = complete
        self.invoke_value = op.invoke_value
        self.value = op.invoke_value
        self.index = op.index

    def __repr__(self):
        return f"{self.op!r} (seen by a read completed at {self.complete})"


def _settle_unknown_writes(ops):
    """One key's operations with its unknown writes settled where the reads
    decide them: a write whose value no read returned is left out (values
    are unique, so placing it can only make reads harder to explain), and
    one whose value a read returned becomes a write known to have happened
    before that read completed. Without this, every unknown write doubles
    the states the search may visit."""
    first_read = {}
    for o in ops:
        if o.f == "read" and o.type == "ok":
            t = _tag(o.value)
            first_read[t] = min(first_read.get(t, math.inf), o.complete)
    out = []
    for o in ops:
        if o.f == "write" and o.type == "info":
            seen = first_read.get(_tag(o.invoke_value))
            if seen is None:
                continue
            o = _Known(o, max(seen, o.invoke))
        out.append(o)
    return out


def check(ops, budget=2_000_000):
    """Checks register operations (f "read"/"write", any key). Returns a
    Result: valid, or the first key found not linearizable, with the longest
    order found and the operations that could not be placed after it."""
    by_key = {}
    for o in ops:
        if o.f not in ("read", "write"):
            raise ValueError(f"line {o.line}: a register operation is a read or a write, "
                             f"not {o.f!r}")
        if o.type == "fail" or (o.type == "info" and o.f == "read"):
            continue
        by_key.setdefault(o.key, []).append(o)
    unknown = None
    for key in sorted(by_key, key=repr):
        key_ops = sorted(_settle_unknown_writes(by_key[key]), key=lambda o: o.invoke)
        valid, order, states = _check_key(key_ops, budget)
        if valid is None:
            unknown = Result(None, key, f"the search for key {key!r} gave up after {states} "
                                        f"states (raise the budget)")
            continue
        if not valid:
            ordered = key_ops
            placed = {ordered[i].index for i in order}
            stuck = [o for o in ordered if o.index not in placed and o.type == "ok"]
            value = None
            for i in order:
                if ordered[i].f == "write":
                    value = ordered[i].invoke_value
            first = stuck[0] if stuck else None
            reason = (f"key {key!r} is not linearizable: after {len(order)} operations "
                      f"placed (the register then holding {value!r}), no order places "
                      f"{first!r}" if first else f"key {key!r} is not linearizable")
            return Result(False, key, reason, stuck)
    return unknown or Result(True)
