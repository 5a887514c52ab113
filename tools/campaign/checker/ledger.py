"""Bank transfers across entity groups, each account keeping a ledger.

Each account is its own entity group; a transfer moves money between two
of them and appends its id to both accounts' ledgers in the same writes
as the balances: in one transaction across groups (two-phase commit), or
through a queue (the debit commits with a message carrying the credit,
which a later transaction of the payee applies; meanwhile the money is
in flight, in the payer's ledger only). Reads of several
accounts are not one snapshot (each group is read at its own position),
so totals can only be checked once every transfer has finished; the
ledgers check the rest:

Operations: f "transfer" (invoke value {"id", "from", "to", "amount"},
ids unique), f "read" (the ok value maps each account it read to
{"balance": n, "ledger": [transfer ids]}), f "touch" (invoke value: an
account; a write to its group that changes neither its balance nor its
ledger, and settles a two-phase transaction left prepared there) and f
"credit" (applies credits that came through a queue; its effects are
judged by the ledgers, not by its own outcome).

  * every read of an account: its balance is the initial balance plus the
    credits less the debits of the transfers in its ledger, each of which
    is a transfer of that account, listed once (the balance and ledger of
    one group are written together);
  * a transfer that failed appears in no ledger;
  * an account's ledger only grows: a read that began after another read
    of it finished shows that read's ledger as a prefix (current reads
    are linearizable per group), and every two reads' ledgers of an
    account are one a prefix of the other (each write appends to what it
    read, conditionally: a ledger never forks);
  * quiescent reads (begun after every transfer finished or began, and
    after a touch of every account invoked after that finished — a group
    whose phase two failed shows its old state until its next writer; the
    runner also applies every credit in flight before its final read):
    the balances of all accounts sum to the total, every transfer in a ledger is in
    both of its accounts' ledgers (never half applied), and every transfer
    that succeeded is in both.
"""

import bisect

from history import Anomaly


def _read_value(o):
    v = o.value
    if not isinstance(v, dict):
        raise ValueError(f"line {o.complete_line}: a read's value maps accounts to "
                         f"{{balance, ledger}}")
    for acct, s in v.items():
        if (not isinstance(s, dict) or set(s) != {"balance", "ledger"} or
                not isinstance(s["balance"], int) or isinstance(s["balance"], bool) or
                not isinstance(s["ledger"], list)):
            raise ValueError(f"line {o.complete_line}: account {acct!r}: not "
                             f"{{\"balance\": integer, \"ledger\": [ids]}}")
    return v


def check(ops, initial):
    """`initial`: every account's balance before the first transfer."""
    anomalies = []
    transfers = {}
    reads = []
    touches = []
    for o in ops:
        if o.f == "transfer":
            v = o.invoke_value
            if (not isinstance(v, dict) or not {"id", "from", "to", "amount"} <= set(v) or
                    not isinstance(v["amount"], int) or isinstance(v["amount"], bool)):
                raise ValueError(f"line {o.line}: a transfer's value is "
                                 f"{{id, from, to, amount}}")
            if v["id"] in transfers:
                raise ValueError(f"line {o.line}: transfer id {v['id']!r} used twice")
            transfers[v["id"]] = o
        elif o.f == "read":
            if o.type == "ok":
                reads.append((o, _read_value(o)))
        elif o.f == "touch":
            if o.type == "ok":
                touches.append(o)
        elif o.f == "credit":
            continue
        else:
            raise ValueError(f"line {o.line}: a ledger operation is a transfer, a read, a "
                             f"touch or a credit, not {o.f!r}")

    reported = set()

    def once(kind, key, message, involved):
        if (kind, key) not in reported:
            reported.add((kind, key))
            anomalies.append(Anomaly(kind, message, involved))

    # Each read, alone.
    for o, v in reads:
        for acct, s in v.items():
            balance = initial
            seen = set()
            for tid in s["ledger"]:
                t = transfers.get(tid)
                if t is None:
                    once("phantom-transfer", tid, f"account {acct!r} lists transfer {tid!r}, "
                         f"which nobody made", [o])
                    continue
                if tid in seen:
                    once("duplicate-transfer", (acct, tid), f"account {acct!r} lists transfer "
                         f"{tid!r} twice", [o, t])
                seen.add(tid)
                tv = t.invoke_value
                if tv["to"] == acct:
                    balance += tv["amount"]
                elif tv["from"] == acct:
                    balance -= tv["amount"]
                else:
                    once("misplaced-transfer", (acct, tid), f"account {acct!r} lists transfer "
                         f"{tid!r} between {tv['from']!r} and {tv['to']!r}", [o, t])
                if t.type == "fail":
                    once("aborted-transfer-visible", tid, f"transfer {tid!r} failed, but "
                         f"account {acct!r} lists it", [t, o])
            if balance != s["balance"]:
                once("balance-ledger-mismatch", (acct, o.index), f"account {acct!r} shows "
                     f"balance {s['balance']}, but its ledger adds up to {balance}", [o])

    # Ledgers only grow: each read against the longest ledger of reads that
    # finished before it began.
    by_complete = sorted(reads, key=lambda r: r[0].complete)
    completes = [r[0].complete for r in by_complete]
    longest = {}  # account -> (ledger, read) over the reads seen so far
    prefix_best = []  # after the i-th completed read: a copy of `longest`
    for o, v in by_complete:
        for acct, s in v.items():
            if acct not in longest or len(s["ledger"]) > len(longest[acct][0]):
                longest[acct] = (s["ledger"], o)
        prefix_best.append(dict(longest))
    for o, v in reads:
        i = bisect.bisect_left(completes, o.invoke)
        if i == 0:
            continue
        before = prefix_best[i - 1]
        for acct, s in v.items():
            if acct in before:
                old, other = before[acct]
                if s["ledger"][:len(old)] != old:
                    once("ledger-regressed", (acct, o.index), f"account {acct!r}: a read shows "
                         f"{len(s['ledger'])} transfers, not extending the {len(old)} an "
                         f"earlier read showed", [other, o])

    # Ledgers never fork: sorted by length, each extends the one before.
    seen = {}  # account -> {ledger tuple: a read showing it}
    for o, v in reads:
        for acct, s in v.items():
            seen.setdefault(acct, {}).setdefault(tuple(s["ledger"]), o)
    for acct, ledgers in seen.items():
        chain = sorted(ledgers, key=len)
        for shorter, longer in zip(chain, chain[1:]):
            if longer[:len(shorter)] != shorter:
                once("ledger-forked", acct, f"account {acct!r}: one read shows "
                     f"{len(shorter)} transfers, another {len(longer)} not extending them",
                     [ledgers[shorter], ledgers[longer]])
                break

    # Quiescent reads: after every account's group was settled by a touch.
    last_transfer = max((t.complete if t.type != "info" else t.invoke
                         for t in transfers.values()), default=0)
    accounts = {a for _, v in reads for a in v}
    accounts |= {t.invoke_value[end] for t in transfers.values() for end in ("from", "to")}
    settled = {}
    for t in touches:
        if t.invoke > last_transfer:
            a = t.invoke_value
            settled[a] = min(settled.get(a, float("inf")), t.complete)
    quiet_from = max(settled.values()) if settled and set(settled) >= accounts else None
    quiet = [(o, v) for o, v in reads if quiet_from is not None and o.invoke > quiet_from]
    for o, v in quiet:
        total = initial * len(accounts)
        s = sum(a["balance"] for a in v.values())
        if set(v) == accounts and s != total:
            once("wrong-total", o.index, f"a quiescent read's {len(v)} balances sum to {s}, "
                 f"not {total}", [o])
        ledgers = {acct: set(a["ledger"]) for acct, a in v.items()}
        for tid, t in transfers.items():
            tv = t.invoke_value
            if tv["from"] not in ledgers or tv["to"] not in ledgers:
                continue
            at_from, at_to = tid in ledgers[tv["from"]], tid in ledgers[tv["to"]]
            if at_from != at_to:
                once("half-applied", tid, f"transfer {tid!r} is in the ledger of "
                     f"{tv['from'] if at_from else tv['to']!r} only", [t, o])
            elif t.type == "ok" and not at_from:
                once("lost-transfer", tid, f"transfer {tid!r} succeeded but is in neither "
                     f"ledger", [t, o])
    return anomalies
