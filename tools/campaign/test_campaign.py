"""Tests of the campaign runner's parts that decide what a history says:
how a gateway's answer becomes ok/fail/info, the seeded schedules and
their validation, and the report's availability figures.

    python3 -m unittest discover -s tools/campaign -p 'test_campaign.py'
"""

import http.server
import json
import os
import random
import socket
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cluster  # noqa: E402
import faults  # noqa: E402
import report  # noqa: E402
import workloads  # noqa: E402


class FakeGateway:
    """A loopback HTTP server answering each POST with the next scripted
    (status, body) — or, for "reset", closing the connection unanswered."""

    def __init__(self, script):
        self.script = list(script)
        self.requests = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length", 0))
                outer.requests.append((self.path, json.loads(self.rfile.read(n))))
                status, body = outer.script.pop(0)
                if status == "reset":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def err(code, status):
    return {"error": {"code": code, "status": status, "message": status.lower()}}


class OutcomeTest(unittest.TestCase):
    def write_outcome(self, answer):
        fake = FakeGateway([answer])
        try:
            gw = workloads.Gateway("127.0.0.1", fake.port, timeout=5)
            w = workloads.Register()
            kind, value, _ = w.run(gw, "write", "g1/r0", 7)
            gw.close()
            return kind, value, fake.requests
        finally:
            fake.close()

    def test_a_commit_is_ok_only_on_200(self):
        kind, value, requests = self.write_outcome((200, {"position": "3", "wrote": True}))
        self.assertEqual((kind, value), ("ok", 7))
        self.assertEqual(requests[0][0], "/v1/commit")
        self.assertEqual(requests[0][1]["mutations"][0]["put"]["value"], "7")

    def test_not_committed_statuses_fail(self):
        for code, status in ((409, "ABORTED"), (503, "UNAVAILABLE"), (400, "INVALID_ARGUMENT"),
                             (412, "FAILED_PRECONDITION"), (403, "PERMISSION_DENIED")):
            self.assertEqual(self.write_outcome((code, err(code, status)))[0], "fail", code)

    def test_unknown_outcomes_are_info(self):
        self.assertEqual(self.write_outcome((504, err(504, "DEADLINE_EXCEEDED")))[0], "info")
        self.assertEqual(self.write_outcome((500, err(500, "INTERNAL")))[0], "info")
        # The request reached the server and the connection broke: unknown.
        self.assertEqual(self.write_outcome(("reset", None))[0], "info")

    def test_a_refused_connection_never_sent_the_commit(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()  # nothing listens there now
        gw = workloads.Gateway("127.0.0.1", port, timeout=5)
        kind, _, error = workloads.Register().run(gw, "write", "g1/r0", 7)
        self.assertEqual(kind, "fail")
        self.assertIn("not sent", error)

    def test_a_failed_read_is_a_fail_and_a_missing_key_reads_null(self):
        fake = FakeGateway([("reset", None), (200, {"found": False, "entity": None}),
                            (200, {"found": True, "entity": {"value": "12"}})])
        try:
            gw = workloads.Gateway("127.0.0.1", fake.port, timeout=5)
            w = workloads.Register()
            self.assertEqual(w.run(gw, "read", "g1/r0", None)[:2], ("fail", None))
            self.assertEqual(w.run(gw, "read", "g1/r0", None)[:2], ("ok", None))
            self.assertEqual(w.run(gw, "read", "g1/r0", None)[:2], ("ok", 12))
            self.assertEqual(fake.requests[1][1]["level"], "current")
            gw.close()
        finally:
            fake.close()

    def test_reads_at_every_level_are_named_by_their_level(self):
        found = (200, {"found": True, "entity": {"value": "3"}})
        fake = FakeGateway([found] * 3)
        try:
            gw = workloads.Gateway("127.0.0.1", fake.port, timeout=5)
            mixed = workloads.Register()
            self.assertEqual(mixed.run(gw, "read-snapshot", "g1/r0", None)[:2], ("ok", 3))
            self.assertEqual(mixed.run(gw, "read-inconsistent", "g1/r0", None)[:2], ("ok", 3))
            fs = {mixed.next_op(random.Random(i))[0] for i in range(200)}
            self.assertEqual(fs, {"write", "read", "read-snapshot", "read-inconsistent"})
            # One level for every read, named "read": the checker's own check.
            stale = workloads.Register(read_level="inconsistent")
            self.assertEqual(stale.run(gw, "read", "g1/r0", None)[:2], ("ok", 3))
            self.assertEqual([r[1]["level"] for r in fake.requests],
                             ["snapshot", "inconsistent", "inconsistent"])
            self.assertEqual([r[1].get("replica") for r in fake.requests], ["A", "A", None],
                             "a client's weak reads all at one replica")
            gw.close()
        finally:
            fake.close()

    def test_a_list_append_commits_with_the_read_token_and_reports_its_reads(self):
        fake = FakeGateway([
            (200, {"replies": [{"found": True, "entity": {"elems": ["4", "9"]}, "readToken": "T"},
                               {"found": False, "entity": None, "readToken": "T"}]}),
            (200, {"position": "5", "wrote": True})])
        try:
            gw = workloads.Gateway("127.0.0.1", fake.port, timeout=5)
            w = workloads.ListAppend()
            mops = [["r", "g1/l0", None], ["append", "g1/l1", 11], ["r", "g1/l1", None]]
            kind, done, _ = w.run(gw, "txn", None, mops)
            self.assertEqual(kind, "ok")
            self.assertEqual(done, [["r", "g1/l0", [4, 9]], ["append", "g1/l1", 11],
                                    ["r", "g1/l1", [11]]])
            commit = fake.requests[1][1]
            self.assertEqual(commit["readToken"], "T")
            self.assertEqual(commit["mutations"], [
                {"table": "Slot", "put": {"grp": "1", "name": "l1", "elems": ["11"]}}])
            gw.close()
        finally:
            fake.close()

    def test_a_conflicting_list_append_fails_and_keeps_its_invocation(self):
        fake = FakeGateway([(200, {"replies": [{"found": False, "readToken": "T"}]}),
                            (409, err(409, "ABORTED"))])
        try:
            gw = workloads.Gateway("127.0.0.1", fake.port, timeout=5)
            mops = [["append", "g1/l0", 3]]
            kind, value, _ = workloads.ListAppend().run(gw, "txn", None, mops)
            self.assertEqual((kind, value), ("fail", mops))
            gw.close()
        finally:
            fake.close()


class CrossGroupWorkloadTest(unittest.TestCase):
    """The cross-group workloads: what they send and how they classify."""

    def run_with(self, script, fn):
        fake = FakeGateway(script)
        try:
            gw = workloads.Gateway("127.0.0.1", fake.port, timeout=5)
            out = fn(gw)
            gw.close()
            return out, fake.requests
        finally:
            fake.close()

    @staticmethod
    def account(balance, ledger, token):
        return {"found": True, "entity": {"value": str(balance), "elems": [str(x) for x in ledger]},
                "readToken": token, "position": "4"}

    def test_a_transfer_commits_both_groups_on_their_read_tokens(self):
        w = workloads.BankAcross()
        value = {"id": 9, "from": "a0", "to": "a3", "amount": 5}
        reads = (200, {"replies": [self.account(100, [], "tA"), self.account(40, [2], "tB")]})
        (kind, got, _), requests = self.run_with(
            [reads, (200, {"wrote": True})], lambda gw: w.run(gw, "transfer", None, value))
        self.assertEqual((kind, got), ("ok", value))
        path, body = requests[1]
        self.assertEqual(path, "/v1/commitAcross")
        first, second = body["commits"]
        self.assertEqual((first["rootKey"], first["readToken"]), (["200"], "tA"))
        self.assertEqual(first["mutations"][0]["put"]["value"], "95")
        self.assertEqual(first["mutations"][0]["put"]["elems"], ["9"])
        self.assertEqual((second["rootKey"], second["readToken"]), (["203"], "tB"))
        self.assertEqual(second["mutations"][0]["put"]["elems"], ["2", "9"])
        # An unknown outcome of the two-phase commit stays unknown.
        (kind, _, _), _ = self.run_with(
            [reads, (504, err(504, "DEADLINE_EXCEEDED"))],
            lambda gw: w.run(gw, "transfer", None, value))
        self.assertEqual(kind, "info")

    def test_a_transfer_through_a_queue_debits_and_sends_its_credit(self):
        import base64
        w = workloads.BankAcross()
        value = {"id": 7, "from": "a1", "to": "a2", "amount": 4, "via": "queue"}
        (kind, _, _), requests = self.run_with(
            [(200, {"replies": [self.account(50, [3], "tA")]}), (200, {"wrote": True})],
            lambda gw: w.run(gw, "transfer", None, value))
        self.assertEqual(kind, "ok")
        path, body = requests[1]
        self.assertEqual((path, body["readToken"], body["rootKey"]), ("/v1/commit", "tA", ["201"]))
        self.assertEqual(body["mutations"][0]["put"]["value"], "46")
        self.assertEqual(body["mutations"][0]["put"]["elems"], ["3", "7"])
        send = body["sends"][0]
        self.assertEqual((send["rootKey"], send["queue"]), (["202"], "credits"))
        self.assertEqual(json.loads(base64.b64decode(send["body"])), {"id": 7, "amount": 4})

    def test_a_credit_applies_what_waits_on_the_queues_read(self):
        import base64
        w = workloads.BankAcross()
        body = base64.b64encode(json.dumps({"id": 7, "amount": 4}).encode()).decode()
        waiting = (200, {"messages": [{"id": "ab01", "queue": "credits", "body": body}],
                         "readToken": "qtok", "position": "9"})
        (kind, got, _), requests = self.run_with(
            [waiting, (200, {"replies": [self.account(10, [1], "atok")]}),
             (200, {"wrote": True})],
            lambda gw: w.run(gw, "credit", None, {"account": "a2"}))
        self.assertEqual((kind, got), ("ok", {"account": "a2", "credited": [7]}))
        path, commit = requests[2]
        self.assertEqual(commit["readToken"], "qtok", "conditional on the queue's read")
        self.assertEqual(commit["consumes"], [{"queue": "credits", "id": "ab01"}])
        self.assertEqual(commit["mutations"][0]["put"]["value"], "14")
        self.assertEqual(commit["mutations"][0]["put"]["elems"], ["1", "7"])

    def test_reads_report_balances_and_ledgers(self):
        w = workloads.BankAcross()
        (kind, got, _), _ = self.run_with(
            [(200, {"replies": [self.account(90, [1, 4], "t"), self.account(110, [1], "u")]})],
            lambda gw: w.run(gw, "read", None, {"accounts": ["a0", "a1"]}))
        self.assertEqual(kind, "ok")
        self.assertEqual(got, {"a0": {"balance": 90, "ledger": [1, 4]},
                               "a1": {"balance": 110, "ledger": [1]}})

    def test_a_dequeue_consumes_what_it_read_with_a_receipt(self):
        w = workloads.Queue()
        waiting = (200, {"messages": [{"id": "ab01", "queue": "q", "body": "MTc="},
                                      {"id": "ab02", "queue": "q", "body": "MjE="}],
                         "readToken": "tok"})
        (kind, got, _), requests = self.run_with(
            [waiting, (200, {"wrote": True})], lambda gw: w.run(gw, "dequeue", "g310", "c5"))
        self.assertEqual((kind, got), ("ok", [17, 21]))
        path, body = requests[1]
        self.assertEqual(path, "/v1/commit")
        self.assertEqual(body["readToken"], "tok")
        self.assertEqual([c["id"] for c in body["consumes"]], ["ab01", "ab02"])
        self.assertEqual(body["mutations"][0]["put"]["name"], "receipt-c5")
        self.assertEqual(body["mutations"][0]["put"]["elems"], ["17", "21"])
        # Unknown: the messages it tried stay in the history for the receipts.
        (kind, got, _), _ = self.run_with(
            [waiting, ("reset", None)], lambda gw: w.run(gw, "dequeue", "g310", "c6"))
        self.assertEqual((kind, got), ("info", [17, 21]))
        # An empty queue is an ok dequeue of nothing, with no commit.
        (kind, got, _), requests = self.run_with(
            [(200, {"messages": [], "readToken": "t"})],
            lambda gw: w.run(gw, "dequeue", "g310", "c7"))
        self.assertEqual((kind, got, len(requests)), ("ok", [], 1))
        self.assertNotEqual(w.retry_value("dequeue", "g310", "c7"), "c7",
                            "a retried final dequeue would overwrite the first one's receipt")

    def test_an_enqueue_sends_its_id_and_some_go_through_two_phase_commit(self):
        w = workloads.Queue()
        paths = []
        for mid in (1, 4):
            (kind, _, _), requests = self.run_with(
                [(200, {"wrote": True})], lambda gw: w.run(gw, "enqueue", None, mid))
            self.assertEqual(kind, "ok")
            paths.append(requests[0][0])
            body = requests[0][1]
            sends = body["sends"] if "sends" in body else body["commits"][0]["sends"]
            self.assertEqual(sends[0]["body"], {1: "MQ==", 4: "NA=="}[mid])
        self.assertEqual(paths, ["/v1/commit", "/v1/commitAcross"])


class FakeCluster:
    names = ["A", "B", "C"]
    disk_dc = "B"
    processes = {"A": None, "B": None, "C": None, "A/gateway": None, "B/gateway": None,
                 "C/gateway": None}


class ScheduleTest(unittest.TestCase):
    def test_a_seed_gives_one_schedule(self):
        a = faults.make_schedule(random.Random("7-schedule"), FakeCluster, 60)
        b = faults.make_schedule(random.Random("7-schedule"), FakeCluster, 60)
        c = faults.make_schedule(random.Random("8-schedule"), FakeCluster, 60)
        self.assertEqual(a, b)
        self.assertNotEqual(a, c)
        self.assertTrue(a)

    def test_faults_come_one_at_a_time_and_end_before_the_recovery(self):
        for seed in range(50):
            s = faults.make_schedule(random.Random(seed), FakeCluster, 40, recovery=5)
            end = 0
            for f in s:
                self.assertGreaterEqual(f["at"], end)
                end = f["at"] + f["duration"]
                self.assertLessEqual(end, 35)
            faults.validate(s, FakeCluster)

    def test_every_kind_draws_a_valid_fault(self):
        for kind in faults.KINDS:
            s = faults.make_schedule(random.Random(kind), FakeCluster, 300, kinds=[kind])
            self.assertTrue(s, kind)
            faults.validate(s, FakeCluster)
            self.assertEqual({f["kind"] for f in s}, {kind})

    def test_only_the_kinds_asked_for(self):
        s = faults.make_schedule(random.Random(1), FakeCluster, 120, kinds=["pause"])
        self.assertEqual({f["kind"] for f in s}, {"pause"})
        self.assertEqual(faults.make_schedule(random.Random(1), FakeCluster, 120, kinds=[]), [])

    def test_a_bad_saved_schedule_is_refused_naming_the_fault(self):
        good = {"at": 1, "kind": "kill", "target": "A", "duration": 2}
        for bad, words in (({}, "a schedule is a JSON list"),
                           ([good, dict(good, kind="flood")], "fault 1: kind 'flood'"),
                           ([dict(good, target="Z")], "no target 'Z'"),
                           ([dict(good, at=-1)], "at must be"),
                           ([dict(good, duration=True)], "duration must be"),
                           ([dict(good, extra=1)], "exactly"),
                           ([dict(good, kind="pause", target="A/gateway")], "no target"),
                           ([dict(good, kind="cut", target="A")], "no target 'A' for cut"),
                           ([dict(good, kind="one-way", target="A>A")], "no target"),
                           ([dict(good, kind="flaky", target="A-B")], "integer amount"),
                           ([dict(good, kind="flaky", target="A-B", amount=101)], "amount"),
                           ([dict(good, kind="clock", target="B/gateway", amount=1.5)],
                            "amount"),
                           ([dict(good, amount=3)], "takes no amount"),
                           ([dict(good, kind="disk-full", target="A")], "one of B")):
            with self.assertRaisesRegex(faults.ScheduleError, words):
                faults.validate(bad, FakeCluster)


class ProcessTest(unittest.TestCase):
    def proc(self, script, name="A"):
        import tempfile
        d = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(d, ignore_errors=True))
        return cluster.Process(name, ["sh", "-c", script], os.path.join(d, "log"),
                               core_dir=os.path.join(d, "cores"))

    def test_an_exit_nobody_caused_is_a_crash_even_if_restarted(self):
        p = self.proc("echo 'megastored: ready'; sleep 0.3; exit 3")
        p.start(timeout=10)
        p.popen.wait()
        p.start(timeout=10)  # a heal restarts it: the crash is kept
        self.assertEqual(p.crashes, [3])
        p.kill()
        self.assertEqual(p.crashes, [3])

    def test_the_runners_own_kills_and_stops_are_not_crashes(self):
        p = self.proc("echo 'megastored: ready'; exec sleep 30")
        p.start(timeout=10)
        p.kill()
        p.start(timeout=10)
        self.assertEqual(p.stop(timeout=5), -15)  # sh's sleep dies of SIGTERM
        self.assertEqual(p.crashes, [])

    def test_a_cell_process_that_lost_its_lease_is_restarted_not_a_crash(self):
        import tempfile
        d = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(d, ignore_errors=True))
        p = cluster.Process("A/tablet1", ["sh", "-c", "echo 'registered in cell a'; sleep 0.2; "
                                          "exit 3"], os.path.join(d, "log"),
                            ready="registered in cell", may_lose_lease=True)
        p.start(timeout=10)
        p.popen.wait()
        self.assertTrue(p.restart_if_lost_lease(timeout=10))
        self.assertEqual((p.crashes, p.lease_exits, p.starts), ([], 1, 2))
        p.popen.wait()
        p.kill()  # the runner's own kill: its heal restarts it, not the supervisor
        self.assertEqual(p.lease_exits, 2)
        self.assertFalse(p.restart_if_lost_lease(timeout=10))
        # Started within its old session's lease it cannot rejoin yet: tried
        # again until it can.
        mark = os.path.join(d, "mark")
        r = cluster.Process("A/tablet2", ["sh", "-c", f"[ -e {mark} ] || {{ touch {mark}; exit 1; }}; "
                                          "echo 'registered in cell a'; exec sleep 30"],
                            os.path.join(d, "log3"), ready="registered in cell",
                            may_lose_lease=True)
        r.start(timeout=10)
        self.assertEqual((r.starts, r.crashes), (2, []))
        r.kill()
        # Any other exit of a cell process is a crash.
        q = cluster.Process("A/master1", ["sh", "-c", "echo campaigning; sleep 0.2; exit 1"],
                            os.path.join(d, "log2"), ready="campaigning", may_lose_lease=True)
        q.start(timeout=10)
        q.popen.wait()
        self.assertFalse(q.restart_if_lost_lease(timeout=10))
        self.assertEqual(q.crashes, [1])

    def test_a_process_never_ready_times_out(self):
        p = self.proc("exec sleep 30")
        with self.assertRaisesRegex(cluster.ClusterError, "not ready after 1 s"):
            p.start(timeout=1)
        self.assertFalse(p.alive())
        p = self.proc("echo starting; exit 2")
        with self.assertRaisesRegex(cluster.ClusterError, "exited with status 2 before"):
            p.start(timeout=10)
        self.assertEqual(p.crashes, [])


class SlowIoTest(unittest.TestCase):
    """The slow-disk preload library delays I/O on files, not on pipes."""

    def test_file_io_is_delayed_while_the_control_file_says_so(self):
        import subprocess
        import tempfile
        lib = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build",
                           "bin", "libmsslowio.so")
        lib = os.environ.get("MS_SLOWIO_LIB", lib)
        if not os.path.exists(lib):
            self.skipTest(f"no {lib} (./ms build makes it)")
        d = tempfile.mkdtemp()
        self.addCleanup(lambda: __import__("shutil").rmtree(d, ignore_errors=True))
        control = os.path.join(d, "delay.us")
        faults.write_control(control, "100000")  # 100 ms per call
        script = (
            "import os, time\n"
            f"fd = os.open({os.path.join(d, 'f')!r}, os.O_WRONLY | os.O_CREAT)\n"
            "t = time.monotonic()\n"
            "for _ in range(3): os.write(fd, b'x')\n"
            "files = time.monotonic() - t\n"
            "r, w = os.pipe()\n"
            "t = time.monotonic()\n"
            "for _ in range(20): os.write(w, b'x'); os.read(r, 1)\n"
            "print(files, time.monotonic() - t)\n")
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             env=dict(os.environ, LD_PRELOAD=lib, MS_SLOWIO_FILE=control),
                             timeout=60)
        files, pipes = map(float, out.stdout.split())
        self.assertGreaterEqual(files, 0.3, "three file writes of 100 ms each")
        self.assertLess(pipes, 2.0, "forty pipe calls would take 4 s if delayed")
        faults.write_control(control, "0")
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             env=dict(os.environ, LD_PRELOAD=lib, MS_SLOWIO_FILE=control),
                             timeout=60)
        self.assertLess(float(out.stdout.split()[0]), 0.3, "0: no delay")


class PlanTest(unittest.TestCase):
    def test_a_replay_naming_topology_and_workload_plans_the_same_run(self):
        import campaign
        for seed in range(40):
            t, w, d, tls = campaign.plan(seed, None, None, ["disk-full"])
            self.assertEqual(campaign.plan(seed, t, w, ["disk-full"]), (t, w, d, tls))
            self.assertEqual(campaign.plan(seed, t, w, ["disk-full"], "on")[3], True)
            self.assertEqual(campaign.plan(seed, t, w, ["disk-full"], "off")[3], False)
            self.assertIsNone(campaign.plan(seed, None, None, ["kill"])[2])


class JudgeTest(unittest.TestCase):
    def test_a_run_that_committed_nothing_or_saw_impossible_statuses_is_not_ok(self):
        import campaign
        # (invoke, complete, f, type, value, dc, error)
        refused = [(1, 2, "write", "fail", 1, "A", "400 mutations[0]: no table Slott"),
                   (3, 4, "read", "ok", None, "A", ""),
                   (9, 10, "write", "ok", 2, "A", "")]  # only in the final phase
        summary = {}
        problems = campaign._judge_operations(refused, 5, summary)
        self.assertIn("no commit succeeded before the final reads", problems)
        self.assertTrue(any("no table Slott" in p for p in problems), problems)
        fine = [(1, 2, "write", "ok", 1, "A", ""),
                (3, 4, "write", "fail", 2, "A", "409 conflict: another writer"),
                (5, 6, "write", "fail", 3, "A", "400 the read position's timestamp 9 us is "
                                                 "beyond this clock (1 us)"),
                (7, 8, "write", "info", 4, "A", "504 outcome unknown")]
        self.assertEqual(campaign._judge_operations(fine, 100, summary), [])
        self.assertEqual(summary["errors_by_kind"], {"409": 1, "400": 1, "504": 1})


class ReportTest(unittest.TestCase):
    def events(self):
        ev = []

        def op(p, f, v, t0, t1, kind):
            ev.append({"process": p, "type": "invoke", "f": f, "value": v, "time": t0})
            if t1 is not None:
                ev.append({"process": p, "type": kind, "f": f, "value": v, "time": t1})

        s = 10**9
        op(1, "read", None, 0, s // 10, "ok")
        op(2, "write", 1, 2 * s, 3 * s, "fail")  # in the fault, failed
        op(3, "read", None, 2 * s + 1, 2 * s + 2, "ok")  # in the fault, ok
        op(4, "write", 2, 4 * s, 5 * s, "ok")  # after the fault: first commit
        op(5, "write", 3, 2 * s + 5, None, None)  # never answered
        op(6, "write", 4, 2 * s + 6, 2 * s + 9, "fail")  # a conflict: left out
        ev[-1]["error"] = "409 conflict: another writer committed log position 9"
        ev.sort(key=lambda e: e["time"])
        return ev

    def test_availability_during_each_fault(self):
        ops = report.operations(self.events())
        self.assertEqual(len(ops), 6)
        a = report.availability(ops, [{"kind": "pause", "target": "A", "start": 2 * 10**9,
                                       "end": 3 * 10**9}], workloads.is_commit)
        self.assertEqual(a[0]["ops"], 3)
        self.assertAlmostEqual(a[0]["ok_share"], 1 / 3)
        self.assertAlmostEqual(a[0]["first_commit_s"], 3.0)
        self.assertEqual((a[1]["kind"], a[1]["ops"], a[1]["ok_share"]), ("none", 2, 1.0))

    def test_the_report_and_plot_name_the_faults(self):
        ops = report.operations(self.events())
        windows = [{"kind": "kill", "target": "B/gateway", "start": 10**9, "end": 2 * 10**9}]
        svg = report.latency_svg(ops, windows, 6 * 10**9)
        self.assertIn("kill B/gateway", svg)
        self.assertEqual(svg.count("<circle"), 5 + 3)  # five answered, three in the legend
        run = {"seed": 5, "verdict": "ok", "workload": "register", "topology": "witness",
               "clients": 6, "seconds": 6}
        md = report.markdown(run, ops, report.availability(ops, windows, workloads.is_commit),
                             "msck: 5 operations: linearizable", "replay-command")
        self.assertIn("| 1.0 s | kill B/gateway |", md)
        self.assertIn("replay-command", md)


if __name__ == "__main__":
    unittest.main()
