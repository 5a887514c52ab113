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
  bank-across — transfers between five accounts, each its own group, by
                two-phase commit (/v1/commitAcross, conditional on both
                reads); each account keeps a ledger of the transfers it took
                part in, written with its balance: all or nothing.
  queue       — messages sent from three groups to two groups' queues
                (some by a two-phase commit's part); consumers read a queue
                and consume what they read in a commit conditional on the
                read that also writes a receipt listing it: each message
                delivered exactly once, none lost.
"""

import base64
import http.client
import itertools
import json
import ssl
import threading
import time

NOT_COMMITTED = {400, 401, 403, 404, 405, 409, 412, 413, 429, 503}


class Sent(Exception):
    """The request may have reached the server; its outcome is unknown."""


class NotSent(Exception):
    """The request never left (the connection was refused)."""


class Gateway:
    """One keep-alive connection to a gateway (one per client thread)."""

    def __init__(self, host, port, timeout, tls=None):
        """`tls`: {"ca", "cert", "key"} file paths for HTTPS with a client
        certificate (mutual TLS), or None for plain HTTP."""
        self.host = host
        self.port = port
        self.timeout = timeout
        self.context = None
        if tls:
            self.context = ssl.create_default_context(cafile=tls["ca"])
            self.context.load_cert_chain(tls["cert"], tls["key"])
        self.conn = None

    def post(self, path, body):
        """(status, reply JSON). Raises NotSent or Sent on transport errors."""
        data = json.dumps(body).encode()
        if self.conn is None:
            if self.context is not None:
                self.conn = http.client.HTTPSConnection(self.host, self.port,
                                                        timeout=self.timeout,
                                                        context=self.context)
            else:
                self.conn = http.client.HTTPConnection(self.host, self.port,
                                                       timeout=self.timeout)
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


def _commit(gw, body, path="/v1/commit"):
    """Sends a commit (or a /v1/commitAcross): (outcome, error) with outcome
    ok, fail (certainly not committed) or info (unknown)."""
    try:
        status, reply = gw.post(path, body)
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

    def __init__(self):
        self.lock = threading.Lock()
        self.values = itertools.count(1)
        self.last_ok = False  # whether the last operation run succeeded (the final phase's)

    def run(self, gw, f, key, value):
        """Runs one operation: (outcome ok/fail/info, value, error)."""
        out = self._run(gw, f, key, value)
        self.last_ok = out[0] == "ok"
        return out

    def unique(self):
        with self.lock:
            return next(self.values)

    def setup(self, gw):
        """Writes the initial data (before any client starts)."""

    def final_ops(self):
        """Operations run once at the end, after the faults healed, each
        until it succeeds (a generator may look at what the earlier ones
        found)."""
        return []

    def retry_value(self, f, key, value):
        """The value of a final operation tried again after it failed."""
        return value

    def msck_args(self):
        return [f"--model={self.name}"]


class Register(Workload):
    name = "register"

    # History names of reads by level: current reads are checked for
    # linearizability, the others for their own guarantees.
    READS = {"current": "read", "snapshot": "read-snapshot", "inconsistent": "read-inconsistent"}
    WEAK_REPLICA = "A"

    def __init__(self, groups=2, keys=5, read_level="mixed"):
        super().__init__()
        self.keys = [(g, f"r{k}") for g in range(1, groups + 1) for k in range(keys)]
        # "mixed": reads at every level, each named by its level. One level:
        # every read at it, named "read" — at a level below current that
        # history is not linearizable (a check of the checker).
        self.read_level = read_level

    def next_op(self, rng):
        grp, name = rng.choice(self.keys)
        key = f"g{grp}/{name}"
        if rng.random() < 0.5:
            return "write", key, self.unique()
        if self.read_level != "mixed":
            return "read", key, None
        r = rng.random()
        level = "current" if r < 0.6 else "snapshot" if r < 0.8 else "inconsistent"
        return self.READS[level], key, None

    def _run(self, gw, f, key, value):
        grp, name = key[1:].split("/")
        if f == "write":
            outcome, error = _commit(gw, {
                "rootTable": "Grp", "rootKey": [grp], "mutations": [
                    {"table": "Slot", "put": {"grp": grp, "name": name, "value": str(value)}}]})
            return outcome, value, error
        level = self.read_level
        get = {"table": "Slot", "key": _slot_key(grp, name)}
        if f != "read" or level == "mixed":
            level = {name: lvl for lvl, name in self.READS.items()}[f]
            if level != "current":
                # Every weak read at one replica (A holds data in every
                # topology): its state only moves forward, so a client's
                # weak reads may be checked for going back.
                get["replica"] = self.WEAK_REPLICA
        get["level"] = level
        try:
            status, reply = gw.post("/v1/get", get)
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

    def __init__(self, groups=2):
        super().__init__()
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

    def _run(self, gw, f, key, mops):
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

    def _run(self, gw, f, key, value):
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


class BankAcross(Workload):
    name = "bank-across"
    ACCOUNTS = {f"a{i}": 200 + i for i in range(5)}  # account -> its group
    BALANCE = 100

    def msck_args(self):
        return ["--model=ledger", f"--initial={self.BALANCE}"]

    def _account(self, acct, balance, ledger):
        g = str(self.ACCOUNTS[acct])
        return {"table": "Slot", "put": {"grp": g, "name": "account", "value": str(balance),
                                         "elems": [str(x) for x in ledger]}}

    def setup(self, gw):
        for acct, g in self.ACCOUNTS.items():
            status, reply = gw.post("/v1/commit", {"rootTable": "Grp", "rootKey": [str(g)],
                                                   "mutations": [self._account(acct, self.BALANCE,
                                                                               [])]})
            if status != 200:
                raise RuntimeError(f"bank-across setup: {_error(status, reply)}")

    CREDITS = "credits"  # the queue of credits on their way to an account
    QUIET_S = 15  # the final drain of credits stops after this long with none

    def __init__(self):
        super().__init__()
        self.credited = False  # whether the last credit operation credited anything

    def next_op(self, rng):
        r = rng.random()
        if r < 0.6:
            a, b = rng.sample(sorted(self.ACCOUNTS), 2)
            return "transfer", None, {"id": self.unique(), "from": a, "to": b,
                                      "amount": rng.randint(1, 10),
                                      "via": "2pc" if r < 0.3 else "queue"}
        if r < 0.8:
            return "credit", None, {"account": rng.choice(sorted(self.ACCOUNTS))}
        return "read", None, {"accounts": sorted(rng.sample(sorted(self.ACCOUNTS),
                                                            rng.randint(2, 5)))}

    def _read(self, gw, accounts):
        """({account: (balance, ledger, read token)}, "") or (None, why not)."""
        try:
            status, reply = gw.post("/v1/batchGet", {"gets": [
                {"table": "Slot", "key": _slot_key(self.ACCOUNTS[a], "account"),
                 "level": "current"} for a in accounts]})
        except (Sent, NotSent) as e:
            return None, str(e)
        if status != 200:
            return None, _error(status, reply)
        replies = reply.get("replies") if isinstance(reply, dict) else None
        if not isinstance(replies, list) or len(replies) != len(accounts) or not all(
                isinstance(r, dict) for r in replies):
            return None, f"gateway answered {str(replies)[:100]} to {len(accounts)} gets"
        out = {}
        for a, r in zip(accounts, replies):
            e = r.get("entity") if r.get("found") else None
            if not isinstance(e, dict) or e.get("value") is None:
                return None, f"account {a} missing: {str(r)[:100]}"
            try:
                out[a] = (int(e["value"]), [int(x) for x in e.get("elems", [])],
                          r.get("readToken", ""))
            except (TypeError, ValueError):
                return None, f"account {a} malformed: {str(e)[:100]}"
        return out, ""

    def _run(self, gw, f, key, value):
        if f == "touch":
            # Settles a two-phase transaction the group holds prepared, and
            # its send makes the gateway deliver the group's whole outbox.
            outcome, error = _commit(gw, {"rootTable": "Grp", "rootKey": [key], "mutations": [
                {"table": "Slot", "put": {"grp": key, "name": "touch",
                                          "value": str(self.unique())}}], "sends": [
                {"rootTable": "Grp", "rootKey": [key], "queue": "settle", "body": ""}]})
            return outcome, value, error
        if f == "credit":
            return self._credit(gw, value)
        if f == "transfer" and value.get("via") == "queue":
            return self._send_transfer(gw, value)
        accounts = value["accounts"] if f == "read" else [value["from"], value["to"]]
        read, err = self._read(gw, accounts)
        if read is None:
            return "fail", value, err
        if f == "read":
            return "ok", {a: {"balance": b, "ledger": l} for a, (b, l, _) in read.items()}, ""
        a, b, amount, tid = value["from"], value["to"], value["amount"], value["id"]
        if read[a][0] < amount:
            return "fail", value, "insufficient funds"
        commits = []
        for acct, delta in ((a, -amount), (b, amount)):
            balance, ledger, token = read[acct]
            commits.append({"rootTable": "Grp", "rootKey": [str(self.ACCOUNTS[acct])],
                            "readToken": token,
                            "mutations": [self._account(acct, balance + delta, ledger + [tid])]})
        outcome, error = _commit(gw, {"commits": commits}, "/v1/commitAcross")
        return outcome, value, error

    def _send_transfer(self, gw, value):
        """A transfer through a queue: the debit (and the transfer's id in
        the payer's ledger) commits with a message carrying the credit to
        the payee's queue; a credit operation there applies it later."""
        a, b, amount, tid = value["from"], value["to"], value["amount"], value["id"]
        read, err = self._read(gw, [a])
        if read is None:
            return "fail", value, err
        balance, ledger, token = read[a]
        if balance < amount:
            return "fail", value, "insufficient funds"
        body = base64.b64encode(json.dumps({"id": tid, "amount": amount}).encode()).decode()
        outcome, error = _commit(gw, {
            "rootTable": "Grp", "rootKey": [str(self.ACCOUNTS[a])], "readToken": token,
            "mutations": [self._account(a, balance - amount, ledger + [tid])],
            "sends": [{"rootTable": "Grp", "rootKey": [str(self.ACCOUNTS[b])],
                       "queue": self.CREDITS, "body": body}]})
        return outcome, value, error

    def _credit(self, gw, value):
        """Applies the credits waiting in an account's queue: the queue and
        the account read at one position, then one commit conditional on
        that read consumes them and adds them to the balance and ledger."""
        acct = value["account"]
        g = str(self.ACCOUNTS[acct])
        self.credited = False
        try:
            status, reply = gw.post("/v1/readQueue", {"rootTable": "Grp", "rootKey": [g],
                                                      "queue": self.CREDITS, "limit": 10})
            if status != 200:
                return "fail", value, _error(status, reply)
            messages = reply.get("messages") if isinstance(reply, dict) else None
            credits = [json.loads(base64.b64decode(m["body"])) for m in messages]
            consumes = [{"queue": self.CREDITS, "id": m["id"]} for m in messages]
            tids = [int(c["id"]) for c in credits]
            total = sum(int(c["amount"]) for c in credits)
        except (Sent, NotSent) as e:
            return "fail", value, str(e)
        except (TypeError, KeyError, ValueError) as e:
            return "fail", value, f"malformed readQueue reply ({e}): {str(reply)[:100]}"
        done = dict(value, credited=tids)
        if not tids:
            return "ok", done, ""
        read, err = self._read(gw, [acct])
        if read is None:
            return "fail", value, err
        balance, ledger, _ = read[acct]
        outcome, error = _commit(gw, {
            "rootTable": "Grp", "rootKey": [g], "readToken": reply.get("readToken", ""),
            "mutations": [self._account(acct, balance + total, ledger + tids)],
            "consumes": consumes})
        # The account was read after the queue: if anything committed in
        # between, the commit (conditional on the queue's read) is refused.
        if outcome == "ok":
            self.credited = True
        return outcome, done, error

    def final_ops(self):
        # Every account group written once more first: a write settles a
        # two-phase transaction its group still holds prepared (its phase
        # two may have failed in a fault), as the next writer always does,
        # and delivers the credits its outbox still holds. Then the credits
        # are applied until none came for a while, and every account read.
        # Any of these that never succeeded leaves no final read (the run is
        # an error then, not judged on an undrained state).
        complete = True
        for acct, g in sorted(self.ACCOUNTS.items()):
            yield "touch", str(g), acct
            complete = complete and self.last_ok
        quiet_from = time.monotonic()
        while complete and time.monotonic() - quiet_from < self.QUIET_S:
            got = False
            for acct in sorted(self.ACCOUNTS):
                yield "credit", None, {"account": acct}
                complete = complete and self.last_ok
                got = got or self.credited
            if got:
                quiet_from = time.monotonic()
            else:
                time.sleep(1.0)
        if complete:
            yield "read", None, {"accounts": sorted(self.ACCOUNTS)}


class Queue(Workload):
    name = "queue"
    SENDERS = [300, 301, 302]
    RECEIVERS = [310, 311]
    QUEUE = "q"
    BATCH = 10  # messages one dequeue consumes at most
    QUIET_S = 15  # the final drain stops after this long with nothing new (sweeps: 10 s)

    def __init__(self):
        super().__init__()
        self.drained = False
        self.final_got = False

    def msck_args(self):
        return ["--model=queue"] + (["--drained"] if self.drained else [])

    def next_op(self, rng):
        if rng.random() < 0.5:
            return "enqueue", None, self.unique()
        return "dequeue", f"g{rng.choice(self.RECEIVERS)}", f"c{self.unique()}"

    def _enqueue(self, gw, mid):
        sender, receiver = self.SENDERS[mid % 3], self.RECEIVERS[(mid // 3) % 2]
        send = {"rootTable": "Grp", "rootKey": [str(receiver)], "queue": self.QUEUE,
                "body": base64.b64encode(str(mid).encode()).decode()}
        if mid % 4:
            return _commit(gw, {"rootTable": "Grp", "rootKey": [str(sender)], "sends": [send]})
        # Every fourth from a part of a two-phase commit with another sender.
        other = self.SENDERS[(mid + 1) % 3]
        return _commit(gw, {"commits": [
            {"rootTable": "Grp", "rootKey": [str(sender)], "sends": [send], "mutations": [
                {"table": "Slot", "put": {"grp": str(sender), "name": "sent", "value": str(mid)}}]},
            {"rootTable": "Grp", "rootKey": [str(other)], "mutations": [
                {"table": "Slot", "put": {"grp": str(other), "name": "sent", "value": str(mid)}}]},
        ]}, "/v1/commitAcross")

    def _dequeue(self, gw, grp, cid):
        try:
            status, reply = gw.post("/v1/readQueue", {"rootTable": "Grp", "rootKey": [grp],
                                                      "queue": self.QUEUE, "limit": self.BATCH})
        except (Sent, NotSent) as e:
            return "fail", cid, str(e)
        if status != 200:
            return "fail", cid, _error(status, reply)
        messages = reply.get("messages") if isinstance(reply, dict) else None
        try:
            ids = [int(base64.b64decode(m["body"]).decode()) for m in messages]
            consumes = [{"queue": self.QUEUE, "id": m["id"]} for m in messages]
        except (TypeError, KeyError, ValueError) as e:
            return "fail", cid, f"malformed readQueue reply ({e}): {str(reply)[:100]}"
        if not ids:
            return "ok", [], ""
        outcome, error = _commit(gw, {
            "rootTable": "Grp", "rootKey": [grp], "readToken": reply.get("readToken", ""),
            "consumes": consumes,
            "mutations": [{"table": "Slot", "put": {"grp": grp, "name": f"receipt-{cid}",
                                                    "elems": [str(x) for x in ids]}}]})
        return outcome, ids, error

    def _receipts(self, gw, grp):
        found, cursor = {}, ""
        while True:
            try:
                status, reply = gw.post("/v1/query", {"table": "Slot", "keyPrefix": [grp],
                                                      "cursor": cursor})
            except (Sent, NotSent) as e:
                return "fail", None, str(e)
            if status != 200:
                return "fail", None, _error(status, reply)
            for e in reply.get("entities", []):
                name = e.get("name", "")
                if name.startswith("receipt-"):
                    found[name[len("receipt-"):]] = [int(x) for x in e.get("elems", [])]
            cursor = reply.get("cursor", "")
            if not cursor:
                return "ok", found, ""

    def _run(self, gw, f, key, value):
        if f == "enqueue":
            outcome, error = self._enqueue(gw, value)
            return outcome, value, error
        grp = key[1:]
        if f == "settle":
            # A commit in a sender's group settles a two-phase transaction
            # left prepared there (its messages wait inside it), and its
            # send makes the gateway deliver the group's whole outbox now.
            outcome, error = _commit(gw, {"rootTable": "Grp", "rootKey": [grp], "sends": [
                {"rootTable": "Grp", "rootKey": [grp], "queue": "settle", "body": ""}]})
            return outcome, value, error
        if f == "receipts":
            return self._receipts(gw, grp)
        outcome, ids, error = self._dequeue(gw, grp, value)
        if outcome == "ok" and ids:
            self.final_got = True
        return outcome, ids, error

    def retry_value(self, f, key, value):
        # A dequeue's receipt is named by its id: a new attempt gets a new
        # one (the failed attempt's receipt may exist).
        return f"c{self.unique()}" if f == "dequeue" else value

    def final_ops(self):
        # Settle every sender's group, drain every receiver until nothing
        # new arrived for a while (a message left in an outbox waits for a
        # sweep), then read every receipt. Drained only if each of those
        # succeeded (the final phase gives an operation up after 90 s).
        complete = True
        for s in self.SENDERS:
            yield "settle", f"g{s}", None
            complete = complete and self.last_ok
        quiet_from = time.monotonic()
        while time.monotonic() - quiet_from < self.QUIET_S:
            self.final_got = False
            for r in self.RECEIVERS:
                yield "dequeue", f"g{r}", f"c{self.unique()}"
                complete = complete and self.last_ok
            if self.final_got:
                quiet_from = time.monotonic()
            else:
                time.sleep(1.0)
        for r in self.RECEIVERS:
            yield "receipts", f"g{r}", None
            complete = complete and self.last_ok
        self.drained = complete


WORKLOADS = {"register": Register, "list-append": ListAppend, "bank": Bank,
             "bank-across": BankAcross, "queue": Queue}


def is_commit(f, value):
    """Whether an operation writes (for availability: time to first commit)."""
    if f in ("write", "transfer", "enqueue"):
        return True
    if f == "txn":
        return any(m[0] == "append" for m in value)
    return False

