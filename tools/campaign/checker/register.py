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


def _hashable(v):
    return json.dumps(v, sort_keys=True) if isinstance(v, (list, dict)) else v


class Result:
    def __init__(self, valid, key=None, reason="", ops=()):
        self.valid = valid  # True, False, or None (unknown: the budget ran out)
        self.key = key
        self.reason = reason
        self.ops = list(ops)

    def __repr__(self):
        return f"Result(valid={self.valid}, key={self.key!r}, reason={self.reason!r})"


def _check_key(ops, budget):
    """ops: one key's operations (ok reads and writes, info writes).
    Returns (valid, placed_most, states) where placed_most is the longest
    order placed when invalid."""
    ops = sorted(ops, key=lambda o: o.invoke)
    n = len(ops)
    written = [_hashable(o.invoke_value) for o in ops]
    read = [_hashable(o.value) for o in ops]
    required = 0
    for i, o in enumerate(ops):
        if o.type == "ok":
            required |= 1 << i
    # Depth-first search over (placed bitmask, value); iterative.
    seen = set()
    stack = [(0, None, ())]
    best = ()
    states = 0
    while stack:
        placed, value, order = stack.pop()
        if placed & required == required:
            return True, order, states
        if (placed, value) in seen:
            continue
        seen.add((placed, value))
        states += 1
        if states > budget:
            return None, best, states
        if len(order) > len(best):
            best = order
        # The earliest completion among unplaced ok operations: nothing
        # invoked after it can go next.
        horizon = math.inf
        for i in range(n):
            if not placed >> i & 1 and ops[i].type == "ok":
                horizon = min(horizon, ops[i].complete)
        for i in range(n):
            if placed >> i & 1:
                continue
            o = ops[i]
            if o.invoke > horizon:
                break  # sorted by invocation: none after it either
            if o.f == "write":
                stack.append((placed | 1 << i, written[i], order + (i,)))
            elif read[i] == value:
                stack.append((placed | 1 << i, value, order + (i,)))
    return False, best, states


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
        key_ops = by_key[key]
        valid, order, states = _check_key(key_ops, budget)
        if valid is None:
            unknown = Result(None, key, f"the search for key {key!r} gave up after {states} "
                                        f"states (raise the budget)")
            continue
        if not valid:
            ordered = sorted(key_ops, key=lambda o: o.invoke)
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
