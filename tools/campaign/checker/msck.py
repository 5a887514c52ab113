#!/usr/bin/env python3
"""msck: checks a campaign history (JSON lines) against a consistency model.

    msck.py --model=register HISTORY.jsonl      current reads of per-key registers
                                                 must be linearizable
    msck.py --model=list-append HISTORY.jsonl   list-append transactions: no
                                                 G0/G1a/G1b/G1c/G2 anomalies, no lost
                                                 appends, strict serializability

Exit status: 0 no anomaly, 1 anomalies (each printed), 2 a malformed
history or a bad flag (the message names the line), 3 the search gave up
(no verdict: raise --budget). Shares no code with the system it checks.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import history  # noqa: E402
import listappend  # noqa: E402
import register  # noqa: E402


def main(argv):
    p = argparse.ArgumentParser(prog="msck.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, choices=["register", "list-append"],
                   help="the consistency model the history must satisfy")
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
            r = register.check(ops, budget=args.budget)
            if r.valid is None:
                print(f"msck: no verdict: {r.reason}")
                return 3
            if not r.valid:
                print(f"msck: {len(ops)} operations: NOT linearizable: {r.reason}")
                return 1
            print(f"msck: {len(ops)} operations: linearizable")
            return 0
        anomalies = listappend.check(ops, realtime=not args.no_realtime)
    except ValueError as e:
        print(f"msck: {args.history}: {e}", file=sys.stderr)
        return 2
    if anomalies:
        print(f"msck: {len(ops)} transactions: {len(anomalies)} anomalies")
        for a in anomalies:
            print(f"  {a.kind}: {a.message}")
            for t in a.txns[:4]:
                print(f"      {t}")
        return 1
    print(f"msck: {len(ops)} transactions: no anomaly")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
