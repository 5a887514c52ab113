"""Bank transfers: money is never created or destroyed.

Operations: f "transfer" (value {"from": account, "to": account, "amount":
n}; its outcome does not matter to this check) and f "read" (the ok value
maps every account to its balance, read at one snapshot). Every ok read
must show exactly the accounts of the first read, with integer balances
summing to `total` — a read of a transfer's debit without its credit (or
the reverse) is a broken snapshot — and, unless negative balances are
allowed, none below zero.
"""

from history import Anomaly


def check(ops, total, allow_negative=False):
    anomalies = []
    accounts = None
    for o in ops:
        if o.f == "transfer":
            continue
        if o.f != "read":
            raise ValueError(f"line {o.line}: a bank operation is a transfer or a read, "
                             f"not {o.f!r}")
        if o.type != "ok":
            continue
        v = o.value
        if not isinstance(v, dict) or any(
                not isinstance(b, int) or isinstance(b, bool) for b in v.values()):
            raise ValueError(f"line {o.complete_line}: a read's value maps accounts to integer balances")
        if accounts is None:
            accounts = set(v)
        if set(v) != accounts:
            missing = sorted(accounts - set(v))
            extra = sorted(set(v) - accounts)
            anomalies.append(Anomaly("wrong-accounts", f"a read shows accounts {sorted(v)}"
                                     f" (missing {missing}, extra {extra})", [o]))
            continue
        s = sum(v.values())
        if s != total:
            anomalies.append(Anomaly("wrong-total", f"a read's balances sum to {s}, not "
                                     f"{total}: {v}", [o]))
        negative = {a: b for a, b in v.items() if b < 0}
        if negative and not allow_negative:
            anomalies.append(Anomaly("negative-balance", f"a read shows {negative}", [o]))
    return anomalies
