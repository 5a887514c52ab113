"""The campaign's workloads, run through the HTTP gateway.

Each client thread is one history "process": it invokes an operation,
records the invocation, runs it against its datacenter's gateway and
records the outcome:

  * ok   — the gateway answered 200: it took effect (or, for a read, this
           is what it read);
  * fail — it certainly did not take effect: a read that failed in any
           way, or a commit answered 400/401/403/404/409/412/503 (the
           gateway's "not committed" statuses), or one whose connection
           was refused before anything was sent;
  * info — unknown: a commit answered 504 or 500, or whose connection
           broke or timed out after it was sent. The thread then takes a
           new process id, as the history format requires.

Workloads (their data: Slot rows of the Campaign schema's groups):
  register    — per-key registers: blind writes of unique values and
                current reads (linearizable).
  list-append — transactions of 1-4 appends/reads on the lists of one
                group: a consistent batch read of the group's keys, then a
                commit conditional on it (read token); read-only ones
                commit nothing.
  bank        — transfers between five accounts of one group
                (read-modify-write with the read token) and reads of every
                account at the current or snapshot level: totals conserved.
"""

import http.client
import itertools
import json
import threading

NOT_COMMITTED = {400, 401, 403, 404, 405, 409, 412, 413, 429, 503}


class Sent(Exception):
    """The request may have reached the server; its outcome is unknown."""


class NotSent(Exception):
    """The request never left (the connection was refused)."""


class Gateway:
    """One keep-alive connection to a gateway (one per client thread)."""

    def __init__(self, host, port, timeout):
        self.host = host
        self.port = port
        self.timeout = timeout
        self.conn = None

    def post(self, path, body):
        """(status, reply JSON). Raises NotSent or Sent on transport errors."""
        data = json.dumps(body).encode()
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self.conn.connect()
            except OSError as e:
                self.close()
                raise NotSent(str(e)) from None
        try:
            self.conn.request("POST", path, body=data,
                              headers={"Content-Type": "application/json"})
            r = self.conn.getresponse()
            raw = r.read()
        except (OSError, http.client.HTTPException) as e:
            self.close()
            raise Sent(f"{type(e).__name__}: {e}") from None
        try:
            reply = json.loads(raw) if raw else {}
        except ValueError:
            reply = {"error": {"message": raw[:200].decode(errors="replace")}}
        if r.getheader("Connection", "").lower() == "close":
            self.close()
        return r.status, reply

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def _error(status, reply):
    e = reply.get("error") if isinstance(reply, dict) else None
    message = e.get("message", "") if isinstance(e, dict) else ""
    return f"{status} {message[:160]}"


def _commit(gw, body):
    """Sends a commit: (outcome, error) with outcome ok, fail (certainly
    not committed) or info (unknown)."""
    try:
        status, reply = gw.post("/v1/commit", body)
    except NotSent as e:
        return "fail", f"not sent: {e}"
    except Sent as e:
        return "info", str(e)
    if status == 200:
        return "ok", ""
    return ("fail" if status in NOT_COMMITTED else "info"), _error(status, reply)


def _bad_batch(replies, n):
    """Why a batchGet's replies of one group cannot be used, or "": one
    reply per get, all read at one log position."""
    if not isinstance(replies, list) or len(replies) != n:
        return f"gateway answered {len(replies) if isinstance(replies, list) else 'no'} " \
               f"replies for {n} gets"
    positions = {r.get("position") for r in replies if isinstance(r, dict)}
    if len(positions) != 1:
        return f"gateway answered one group's keys at positions {sorted(map(str, positions))}"
    return ""


def _slot_key(grp, name):
    return [str(grp), name]


class Workload:
    """Base: a thread-safe source of operations, and how to run them."""

    name = ""

    def __init__(self, rng):
        self.rng = rng
        self.lock = threading.Lock()
        self.values = itertools.count(1)

    def unique(self):
        with self.lock:
            return next(self.values)

    def setup(self, gw):
        """Writes the initial data (before any client starts)."""

    def final_ops(self):
        """Operations run once at the end, after the faults healed."""
        return []

    def msck_args(self):
        return [f"--model={self.name}"]


class Register(Workload):
    name = "register"

    def __init__(self, rng, groups=2, keys=5, read_level="current"):
        super().__init__(rng)
        self.keys = [(g, f"r{k}") for g in range(1, groups + 1) for k in range(keys)]
        self.read_level = read_level  # only current reads are linearizable

    def next_op(self, rng):
        grp, name = rng.choice(self.keys)
        key = f"g{grp}/{name}"
        if rng.random() < 0.5:
            return "write", key, self.unique()
        return "read", key, None

    def run(self, gw, f, key, value):
        grp, name = key[1:].split("/")
        if f == "write":
            outcome, error = _commit(gw, {
                "rootTable": "Grp", "rootKey": [grp], "mutations": [
                    {"table": "Slot", "put": {"grp": grp, "name": name, "value": str(value)}}]})
            return outcome, value, error
        try:
            status, reply = gw.post("/v1/get", {"table": "Slot", "key": _slot_key(grp, name),
                                                "level": self.read_level})
        except (Sent, NotSent) as e:
            return "fail", None, str(e)
        if status != 200:
            return "fail", None, _error(status, reply)
        entity = reply.get("entity") if reply.get("found") else None
        v = entity.get("value") if entity else None
        return "ok", int(v) if v is not None else None, ""

    def final_ops(self):
        return [("read", f"g{g}/{n}", None) for g, n in self.keys]


class ListAppend(Workload):
    name = "list-append"
    KEYS_ACTIVE = 6  # keys of a group in use at once
    APPENDS_PER_SHIFT = 60  # appends to a group before its window moves on by a key

    def __init__(self, rng, groups=2):
        super().__init__(rng)
        self.groups = list(range(1, groups + 1))
        self.appends = {g: 0 for g in self.groups}
        self.used = {g: set() for g in self.groups}

    def next_op(self, rng):
        grp = rng.choice(self.groups)
        with self.lock:
            base = self.appends[grp] // self.APPENDS_PER_SHIFT
        mops = []
        for _ in range(rng.randint(1, 4)):
            k = base + rng.randrange(self.KEYS_ACTIVE)
            key = f"g{grp}/l{k}"
            if rng.random() < 0.5:
                with self.lock:
                    self.appends[grp] += 1
                    self.used[grp].add(k)
                mops.append(["append", key, self.unique()])
            else:
                with self.lock:
                    self.used[grp].add(k)
                mops.append(["r", key, None])
        return "txn", None, mops

    def run(self, gw, f, key, mops):
        grp = mops[0][1][1:].split("/")[0]
        names = []
        for _, k, _ in mops:
            name = k.split("/")[1]
            if name not in names:
                names.append(name)
        try:
            status, reply = gw.post("/v1/batchGet", {"gets": [
                {"table": "Slot", "key": _slot_key(grp, n), "level": "current"} for n in names]})
        except (Sent, NotSent) as e:
            return "fail", mops, str(e)
        if status != 200:
            return "fail", mops, _error(status, reply)
        replies = reply.get("replies", [])
        bad = _bad_batch(replies, len(names))
        if bad:
            return "fail", mops, bad
        lists = {}
        for n, r in zip(names, replies):
            entity = r.get("entity") if r.get("found") else None
            lists[n] = [int(x) for x in (entity or {}).get("elems", [])]
        token = replies[0].get("readToken", "")
        done = []
        writes = set()
        for op, k, v in mops:
            n = k.split("/")[1]
            if op == "append":
                lists[n].append(v)
                writes.add(n)
                done.append([op, k, v])
            else:
                done.append([op, k, list(lists[n])])
        if not writes:
            return "ok", done, ""
        mutations = [{"table": "Slot", "put": {"grp": grp, "name": n,
                                               "elems": [str(x) for x in lists[n]]}}
                     for n in names if n in writes]
        outcome, error = _commit(gw, {"rootTable": "Grp", "rootKey": [grp],
                                      "mutations": mutations, "readToken": token})
        return outcome, done if outcome == "ok" else mops, error

    def final_ops(self):
        ops = []
        for g in self.groups:
            keys = sorted(self.used[g])
            for i in range(0, len(keys), 50):
                ops.append(("txn", None, [["r", f"g{g}/l{k}", None] for k in keys[i:i + 50]]))
        return ops


class Bank(Workload):
    name = "bank"
    GROUP = 100
    ACCOUNTS = [f"a{i}" for i in range(5)]
    BALANCE = 100

    def msck_args(self):
        return ["--model=bank", f"--total={self.BALANCE * len(self.ACCOUNTS)}"]

    def setup(self, gw):
        body = {"rootTable": "Grp", "rootKey": [str(self.GROUP)], "mutations": [
            {"table": "Slot", "put": {"grp": str(self.GROUP), "name": a,
                                      "value": str(self.BALANCE)}} for a in self.ACCOUNTS]}
        status, reply = gw.post("/v1/commit", body)
        if status != 200:
            raise RuntimeError(f"bank setup: {_error(status, reply)}")

    def next_op(self, rng):
        if rng.random() < 0.6:
            a, b = rng.sample(self.ACCOUNTS, 2)
            return "transfer", None, {"from": a, "to": b, "amount": rng.randint(1, 10)}
        return "read", None, {"level": rng.choice(["current", "snapshot"])}

    def _read(self, gw, names, level):
        status, reply = gw.post("/v1/batchGet", {"gets": [
            {"table": "Slot", "key": _slot_key(self.GROUP, n), "level": level} for n in names]})
        if status != 200:
            return None, None, _error(status, reply)
        replies = reply.get("replies", [])
        bad = _bad_batch(replies, len(names))
        if bad:
            return None, None, bad
        balances = {}
        for n, r in zip(names, replies):
            if r.get("found") and r.get("entity", {}).get("value") is not None:
                balances[n] = int(r["entity"]["value"])
        return balances, (replies[0].get("readToken", "") if replies else ""), ""

    def run(self, gw, f, key, value):
        if f == "read":
            try:
                balances, _, err = self._read(gw, self.ACCOUNTS, value["level"])
            except (Sent, NotSent) as e:
                return "fail", value, str(e)
            if balances is None:
                return "fail", value, err
            return "ok", balances, ""
        a, b, amount = value["from"], value["to"], value["amount"]
        try:
            balances, token, err = self._read(gw, [a, b], "current")
        except (Sent, NotSent) as e:
            return "fail", value, str(e)
        if balances is None:
            return "fail", value, err
        if a not in balances or b not in balances:
            return "fail", value, f"accounts missing: {balances}"
        if balances[a] < amount:
            return "fail", value, "insufficient funds"
        g = str(self.GROUP)
        outcome, error = _commit(gw, {
            "rootTable": "Grp", "rootKey": [g], "readToken": token, "mutations": [
                {"table": "Slot", "put": {"grp": g, "name": a,
                                          "value": str(balances[a] - amount)}},
                {"table": "Slot", "put": {"grp": g, "name": b,
                                          "value": str(balances[b] + amount)}}]})
        return outcome, value, error

    def final_ops(self):
        return [("read", None, {"level": "current"})]


WORKLOADS = {"register": Register, "list-append": ListAppend, "bank": Bank}


def is_commit(f, value):
    """Whether an operation writes (for availability: time to first commit)."""
    if f in ("write", "transfer"):
        return True
    if f == "txn":
        return any(m[0] == "append" for m in value)
    return False

