#!/usr/bin/env python3
"""msck: checks a campaign history (JSON lines) against a consistency model.

    msck.py --model=register HISTORY.jsonl      current reads of per-key registers
                                                 must be linearizable; snapshot and
                                                 inconsistent reads real and monotonic
    msck.py --model=list-append HISTORY.jsonl   list-append transactions: no
                                                 G0/G1a/G1b/G1c/G2 anomalies, no lost
                                                 appends, strict serializability
    msck.py --model=bank --total=N HISTORY.jsonl
                                                 every read's balances sum to N
    msck.py --model=queue [--drained] HISTORY.jsonl
                                                 every message delivered exactly once
    msck.py --model=ledger --initial=N HISTORY.jsonl
                                                 transfers across groups: all or
                                                 nothing, ledgers match balances

Exit status: 0 no anomaly, 1 anomalies (each printed), 2 a malformed
history or a bad flag (the message names the line), 3 the search gave up
(no verdict: raise --budget), 4 the checker itself failed (a bug: no
verdict). Shares no code with the system it checks.
"""

import argparse
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bank  # noqa: E402
import history  # noqa: E402
import ledger  # noqa: E402
import listappend  # noqa: E402
import queues  # noqa: E402
import register  # noqa: E402
import weakread  # noqa: E402


def main(argv):
    """Runs the check; any failure of the checker itself is status 4, never
    a verdict."""
    try:
        return _main(argv)
    except SystemExit:
        raise
    except MemoryError:
        print("msck: out of memory: no verdict", file=sys.stderr)
        return 4
    except Exception:  # noqa: BLE001 - a checker bug must not read as anomalies
        traceback.print_exc()
        print("msck: internal error: no verdict", file=sys.stderr)
        return 4


def _main(argv):
    p = argparse.ArgumentParser(prog="msck.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True,
                   choices=["register", "list-append", "bank", "queue", "ledger"],
                   help="the consistency model the history must satisfy")
    p.add_argument("--total", type=int, help="bank: the sum every read's balances must show")
    p.add_argument("--initial", type=int,
                   help="ledger: every account's balance before the first transfer")
    p.add_argument("--allow-negative", action="store_true",
                   help="bank: balances may go below zero")
    p.add_argument("--drained", action="store_true",
                   help="queue: the queues were drained at the end: every committed message "
                        "must have been delivered")
    p.add_argument("--budget", type=int, default=2_000_000,
                   help="register: the most search states per key before giving up "
                        "(default 2,000,000)")
    p.add_argument("--no-realtime", action="store_true",
                   help="list-append: check serializability only, not strict "
                        "serializability")
    p.add_argument("history", help="the history file (JSON lines)")
    args = p.parse_args(argv)
    if args.budget < 1:
        p.error("--budget must be positive")
    if args.model == "bank" and args.total is None:
        p.error("--model=bank needs --total")
    if args.model == "ledger" and args.initial is None:
        p.error("--model=ledger needs --initial")
    try:
        ops = history.read_file(args.history)
    except (OSError, UnicodeDecodeError) as e:
        print(f"msck: {args.history}: {e}", file=sys.stderr)
        return 2
    except history.HistoryError as e:
        print(f"msck: {args.history}: {e}", file=sys.stderr)
        return 2
    try:
        if args.model == "register":
            # Snapshot and inconsistent reads have guarantees of their own;
            # linearizability is asked of current reads only.
            weak = weakread.check(ops)
            if weak:
                print(f"msck: {len(ops)} operations: {len(weak)} anomalies of snapshot or "
                      f"inconsistent reads")
                for a in weak:
                    print(f"  {a.kind}: {a.message}")
                    for t in a.txns[:4]:
                        print(f"      {t}")
                return 1
            r = register.check([o for o in ops if o.f not in weakread.WEAK_READS],
                               budget=args.budget)
            if r.valid is None:
                print(f"msck: no verdict: {r.reason}")
                return 3
            if not r.valid:
                print(f"msck: {len(ops)} operations: NOT linearizable: {r.reason}")
                return 1
            print(f"msck: {len(ops)} operations: linearizable")
            return 0
        if args.model == "bank":
            anomalies = bank.check(ops, args.total, allow_negative=args.allow_negative)
        elif args.model == "queue":
            anomalies = queues.check(ops, drained=args.drained)
        elif args.model == "ledger":
            anomalies = ledger.check(ops, args.initial)
        else:
            anomalies = listappend.check(ops, realtime=not args.no_realtime)
    except ValueError as e:
        print(f"msck: {args.history}: {e}", file=sys.stderr)
        return 2
    if anomalies:
        print(f"msck: {len(ops)} operations: {len(anomalies)} anomalies")
        for a in anomalies:
            print(f"  {a.kind}: {a.message}")
            for t in a.txns[:4]:
                print(f"      {t}")
        return 1
    print(f"msck: {len(ops)} operations: no anomaly")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
