"""Tests of the campaign's checker on known-good and known-bad histories.

    python3 -m unittest discover -s tools/campaign/checker -p 'test_*.py'
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bank  # noqa: E402
import history  # noqa: E402
import ledger  # noqa: E402
import listappend  # noqa: E402
import queues  # noqa: E402
import register  # noqa: E402
import weakread  # noqa: E402

MSCK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "msck.py")


class H:
    """Builds a history: h.invoke(p, f, key, value, t); h.ok(p, ...)."""

    def __init__(self):
        self.lines = []

    def ev(self, kind, process, f, key, value, time):
        e = {"process": process, "type": kind, "f": f, "value": value, "time": time}
        if key is not None:
            e["key"] = key
        self.lines.append(json.dumps(e))
        return self

    def op(self, process, f, key, invoke_value, start, end, kind="ok", value="same"):
        """One whole operation (the events are sorted by time at the end)."""
        self.ev("invoke", process, f, key, invoke_value, start)
        if kind is not None:
            self.ev(kind, process, f, key, invoke_value if value == "same" else value, end)
        return self

    def ops(self):
        lines = sorted(self.lines, key=lambda l: json.loads(l)["time"])
        return history.parse_lines(lines)


def txn(h, process, start, end, invoked, completed=None, kind="ok"):
    h.ev("invoke", process, "txn", None, invoked, start)
    if kind is not None:
        h.ev(kind, process, "txn", None, completed if completed is not None else invoked, end)


class HistoryTest(unittest.TestCase):
    def test_pairs_invocations_with_completions(self):
        ops = H().op(1, "write", "x", 1, 0, 10).op(2, "read", "x", None, 5, 20,
                                                      value=1).ops()
        self.assertEqual([(o.f, o.type, o.invoke, o.complete) for o in ops],
                         [("write", "ok", 0, 10), ("read", "ok", 5, 20)])
        self.assertEqual(ops[1].value, 1)

    def test_an_operation_never_answered_is_unknown(self):
        ops = H().op(1, "write", "x", 1, 0, None, kind=None).ops()
        self.assertEqual(ops[0].type, "info")
        self.assertEqual(ops[0].complete, float("inf"))

    def test_malformed_lines_are_refused_naming_the_line(self):
        bad = [
            ['{"process": 1, "type": "invoke", "f": "read", "time": 1'],
            ['[1, 2]'],
            ['{"type": "invoke", "f": "read", "time": 1}'],
            ['{"process": "1", "type": "invoke", "f": "read", "time": 1}'],
            ['{"process": 1, "type": "begin", "f": "read", "time": 1}'],
            ['{"process": 1, "type": "ok", "f": "read", "time": 1}'],
            ['{"process": 1, "type": "invoke", "f": "read", "time": 5}',
             '{"process": 1, "type": "ok", "f": "read", "time": 4}'],
            ['{"process": 1, "type": "invoke", "f": "read", "time": 1}',
             '{"process": 1, "type": "invoke", "f": "read", "time": 2}'],
            ['{"process": 1, "type": "invoke", "f": "read", "time": 1}',
             '{"process": 1, "type": "info", "f": "read", "time": 2}',
             '{"process": 1, "type": "invoke", "f": "read", "time": 3}'],
            ['{"process": 1, "type": "invoke", "f": "read", "key": "x", "time": 1}',
             '{"process": 1, "type": "ok", "f": "write", "key": "x", "time": 2}'],
            ['{"process": true, "type": "invoke", "f": "read", "time": 1}'],
        ]
        for lines in bad:
            with self.assertRaises(history.HistoryError, msg=lines) as e:
                history.parse_lines(lines)
            self.assertIn("line ", str(e.exception))


class RegisterTest(unittest.TestCase):
    def check(self, h):
        return register.check(h.ops())

    def test_sequential_writes_and_reads(self):
        h = H().op(1, "read", "x", None, 0, 1, value=None)
        h.op(1, "write", "x", 1, 2, 3).op(1, "read", "x", None, 4, 5, value=1)
        h.op(2, "write", "x", 2, 6, 7).op(2, "read", "x", None, 8, 9, value=2)
        self.assertTrue(self.check(h).valid)

    def test_a_stale_read_after_a_write_completed_is_not_linearizable(self):
        h = H().op(1, "write", "x", 1, 0, 10).op(1, "write", "x", 2, 11, 20)
        h.op(2, "read", "x", None, 21, 30, value=1)
        r = self.check(h)
        self.assertIs(r.valid, False)
        self.assertEqual(r.key, "x")
        self.assertEqual(r.ops[0].value, 1)

    def test_a_read_concurrent_with_a_write_may_see_either_value(self):
        for seen in (1, 2):
            h = H().op(1, "write", "x", 1, 0, 10).op(1, "write", "x", 2, 11, 30)
            h.op(2, "read", "x", None, 12, 20, value=seen)
            self.assertTrue(self.check(h).valid, seen)

    def test_reads_cannot_go_back_once_one_saw_the_new_value(self):
        h = H().op(1, "write", "x", 1, 0, 10).op(1, "write", "x", 2, 11, 100)
        h.op(2, "read", "x", None, 12, 20, value=2).op(3, "read", "x", None, 21, 30, value=1)
        self.assertIs(self.check(h).valid, False)

    def test_an_unknown_write_may_or_may_not_have_happened(self):
        for seen in (None, 5):
            h = H().op(1, "write", "x", 5, 0, 5, kind="info")  # (told "unknown" at 5)
            h.op(2, "read", "x", None, 50, 60, value=seen)
            self.assertTrue(self.check(h).valid, seen)
        # ... but not appear and then vanish.
        h = H().op(1, "write", "x", 5, 0, None, kind=None)  # (never answered)
        h.op(2, "read", "x", None, 50, 60, value=5).op(2, "read", "x", None, 61, 70, value=None)
        self.assertIs(self.check(h).valid, False)

    def test_a_failed_write_is_never_seen(self):
        h = H().op(1, "write", "x", 5, 0, 10, kind="fail")
        h.op(2, "read", "x", None, 20, 30, value=5)
        self.assertIs(self.check(h).valid, False)

    def test_keys_are_checked_apart(self):
        h = H().op(1, "write", "x", 1, 0, 10).op(2, "write", "y", 1, 0, 10)
        h.op(3, "read", "y", None, 20, 30, value=1).op(3, "read", "x", None, 31, 40, value=None)
        r = self.check(h)
        self.assertIs(r.valid, False)
        self.assertEqual(r.key, "x")

    def test_many_concurrent_operations_are_searched_in_bounded_states(self):
        h = H()
        for p in range(12):
            h.op(p, "write", "x", p, 0, 1000)
        h.op(99, "read", "x", None, 1001, 1002, value=7)
        self.assertTrue(self.check(h).valid)
        r = register.check(h.ops(), budget=3)
        self.assertIsNone(r.valid)
        self.assertIn("gave up", r.reason)

    def test_unknown_writes_nobody_read_cost_nothing(self):
        # Forty writes of unknown outcome, never read, among known ones:
        # without settling them first the search would need ~2^40 states.
        h = H()
        for p in range(40):
            h.op(p, "write", "x", 100 + p, p, 500, kind="info")
        for i in range(5):
            h.op(50 + i, "write", "x", i, 100 + 10 * i, 105 + 10 * i)
            h.op(60 + i, "read", "x", None, 106 + 10 * i, 108 + 10 * i, value=i)
        self.assertIs(register.check(h.ops(), budget=200).valid, True)
        # One of them read, then a read after that one completed sees an
        # older value: it happened, so the register cannot go back.
        h.op(70, "read", "x", None, 200, 210, value=120)
        h.op(71, "read", "x", None, 220, 230, value=4)
        self.assertIs(register.check(h.ops(), budget=200).valid, False)


class RegisterValueTest(unittest.TestCase):
    def test_values_of_different_types_differ(self):
        # true is not 1, 1 is not 1.0, a list is not the string of its JSON.
        for written, read in ((True, 1), (1, 1.0), ([1], "[1]"), (None, "null")):
            h = H().op(1, "write", "x", written, 0, 10).op(2, "read", "x", None, 20, 30,
                                                            value=read)
            self.assertIs(register.check(h.ops()).valid, False, (written, read))
            h = H().op(1, "write", "x", written, 0, 10).op(2, "read", "x", None, 20, 30,
                                                            value=written)
            self.assertTrue(register.check(h.ops()).valid, written)


class WeakReadTest(unittest.TestCase):
    def kinds(self, h):
        return sorted({a.kind for a in weakread.check(h.ops())})

    def test_stale_but_real_and_monotonic_reads_pass(self):
        h = H().op(1, "write", "x", 1, 0, 10).op(1, "write", "x", 2, 20, 30)
        h.op(2, "read-snapshot", "x", None, 31, 32, value=1)  # stale: allowed
        h.op(2, "read-snapshot", "x", None, 33, 34, value=2)
        h.op(3, "read-inconsistent", "x", None, 5, 6, value=None)
        h.op(3, "read-inconsistent", "x", None, 7, 8, value=1)  # concurrent with its write
        self.assertEqual(self.kinds(h), [])
        # The register model asks linearizability of current reads only.
        self.assertTrue(register.check([o for o in h.ops()
                                        if o.f not in weakread.WEAK_READS]).valid)

    def test_phantom_aborted_future_and_regressed_reads(self):
        h = H().op(1, "write", "x", 1, 0, 10).op(1, "write", "x", 2, 20, 30)
        h.op(1, "write", "x", 3, 40, 50, kind="fail").op(1, "write", "x", 4, 60, 70)
        h.op(2, "read-snapshot", "x", None, 31, 32, value=2)
        h.op(2, "read-snapshot", "x", None, 33, 34, value=1)  # older than what it read
        h.op(3, "read-inconsistent", "x", None, 51, 52, value=3)
        h.op(4, "read-snapshot", "x", None, 52, 53, value=4)  # write began at 60
        h.op(5, "read-snapshot", "x", None, 54, 55, value=9)
        h.op(6, "read-inconsistent", "x", None, 31, 32, value=2)
        h.op(6, "read-inconsistent", "x", None, 33, 34, value=None)  # None after a value
        self.assertEqual(self.kinds(h), ["weak-read-aborted", "weak-read-from-future",
                                         "weak-read-phantom", "weak-read-regressed"])

    def test_the_levels_are_not_compared_with_each_other(self):
        # An inconsistent read may see data its replica has not yet recorded
        # applied, which a later snapshot read does not show.
        h = H().op(1, "write", "x", 1, 0, 10).op(1, "write", "x", 2, 20, 30)
        h.op(2, "read-inconsistent", "x", None, 31, 32, value=2)
        h.op(2, "read-snapshot", "x", None, 33, 34, value=1)
        self.assertEqual(self.kinds(h), [])


class ListAppendTest(unittest.TestCase):
    def kinds(self, h, realtime=True):
        return sorted({a.kind for a in listappend.check(h.ops(), realtime=realtime)})

    def test_serial_transactions_have_no_anomaly(self):
        h = H()
        txn(h, 1, 0, 10, [["append", "x", 1], ["r", "x", None]],
            [["append", "x", 1], ["r", "x", [1]]])
        txn(h, 2, 20, 30, [["append", "x", 2], ["append", "y", 1], ["r", "y", None]],
            [["append", "x", 2], ["append", "y", 1], ["r", "y", [1]]])
        txn(h, 1, 40, 50, [["r", "x", None], ["r", "y", None]],
            [["r", "x", [1, 2]], ["r", "y", [1]]])
        self.assertEqual(self.kinds(h), [])

    def test_g0_write_cycle(self):
        # T1 appends x1 y1, T2 appends x2 y2; x shows T1 before T2, y the reverse.
        h = H()
        txn(h, 1, 0, 10, [["append", "x", 1], ["append", "y", 1]])
        txn(h, 2, 0, 10, [["append", "x", 2], ["append", "y", 2]])
        txn(h, 3, 20, 30, [["r", "x", None], ["r", "y", None]],
            [["r", "x", [1, 2]], ["r", "y", [2, 1]]])
        self.assertIn("G0", self.kinds(h))

    def test_g1a_aborted_read(self):
        h = H()
        txn(h, 1, 0, 10, [["append", "x", 1]], kind="fail")
        txn(h, 2, 20, 30, [["r", "x", None]], [["r", "x", [1]]])
        self.assertIn("G1a", self.kinds(h))

    def test_g1b_intermediate_read(self):
        h = H()
        txn(h, 1, 0, 10, [["append", "x", 1], ["append", "x", 2]])
        txn(h, 2, 5, 15, [["r", "x", None]], [["r", "x", [1]]])
        txn(h, 3, 20, 30, [["r", "x", None]], [["r", "x", [1, 2]]])
        self.assertIn("G1b", self.kinds(h))

    def test_g1c_circular_information_flow(self):
        # T1 reads T2's append to y, T2 reads T1's append to x.
        h = H()
        txn(h, 1, 0, 10, [["append", "x", 1], ["r", "y", None]],
            [["append", "x", 1], ["r", "y", [1]]])
        txn(h, 2, 0, 10, [["append", "y", 1], ["r", "x", None]],
            [["append", "y", 1], ["r", "x", [1]]])
        self.assertIn("G1c", self.kinds(h))

    def test_write_skew_is_g_single_or_g2(self):
        # Each reads the other's key empty and appends to its own.
        h = H()
        txn(h, 1, 0, 10, [["r", "y", None], ["append", "x", 1]],
            [["r", "y", []], ["append", "x", 1]])
        txn(h, 2, 0, 10, [["r", "x", None], ["append", "y", 1]],
            [["r", "x", []], ["append", "y", 1]])
        txn(h, 3, 20, 30, [["r", "x", None], ["r", "y", None]],
            [["r", "x", [1]], ["r", "y", [1]]])
        kinds = self.kinds(h)
        self.assertTrue("G2" in kinds or "G-single" in kinds, kinds)

    def test_write_skew_seen_only_as_empty_reads(self):
        # No read ever shows either append: the anti-dependencies still hold.
        h = H()
        txn(h, 1, 0, 10, [["r", "y", None], ["append", "x", 1]],
            [["r", "y", []], ["append", "x", 1]])
        txn(h, 2, 0, 10, [["r", "x", None], ["append", "y", 1]],
            [["r", "x", []], ["append", "y", 1]])
        kinds = self.kinds(h, realtime=False)
        self.assertTrue("G2" in kinds or "G-single" in kinds, kinds)

    def test_a_lost_update(self):
        # Both read x empty and append to it; nobody reads x again.
        h = H()
        txn(h, 1, 0, 10, [["r", "x", None], ["append", "x", 1]],
            [["r", "x", []], ["append", "x", 1]])
        txn(h, 2, 0, 10, [["r", "x", None], ["append", "x", 2]],
            [["r", "x", []], ["append", "x", 2]])
        self.assertNotEqual(self.kinds(h, realtime=False), [])

    def test_g1b_in_the_middle_of_a_read(self):
        # T2 reads T1's first append to x but not its second, then another's.
        h = H()
        txn(h, 1, 0, 10, [["append", "x", 1], ["append", "x", 3]])
        txn(h, 2, 0, 10, [["append", "x", 5]])
        txn(h, 3, 20, 30, [["r", "x", None]], [["r", "x", [1, 5]]])
        self.assertIn("G1b", self.kinds(h))

    def test_incompatible_orders_and_duplicates(self):
        h = H()
        txn(h, 1, 0, 10, [["append", "x", 1]])
        txn(h, 2, 0, 10, [["append", "x", 2]])
        txn(h, 3, 20, 30, [["r", "x", None]], [["r", "x", [1, 2]]])
        txn(h, 4, 20, 30, [["r", "x", None]], [["r", "x", [2, 1]]])
        txn(h, 5, 20, 30, [["r", "x", None]], [["r", "x", [1, 1]]])
        kinds = self.kinds(h)
        self.assertIn("incompatible-order", kinds)
        self.assertIn("duplicate-elements", kinds)

    def test_garbage_and_internal_reads(self):
        h = H()
        txn(h, 1, 0, 10, [["r", "x", None]], [["r", "x", [9]]])
        txn(h, 2, 20, 30, [["append", "y", 1], ["r", "y", None]],
            [["append", "y", 1], ["r", "y", []]])
        kinds = self.kinds(h)
        self.assertIn("garbage-read", kinds)
        self.assertIn("internal", kinds)

    def test_a_lost_append(self):
        h = H()
        txn(h, 1, 0, 10, [["append", "x", 1]])
        txn(h, 2, 20, 30, [["r", "x", None]], [["r", "x", []]])
        self.assertIn("lost-append", self.kinds(h))

    def test_a_stale_read_breaks_strict_serializability_only(self):
        # T1 appends x1 and completes; T2 begins after and reads x empty;
        # a later read shows x1. Serializable (T2 before T1), not strict.
        h = H()
        txn(h, 1, 0, 10, [["append", "x", 1]])
        txn(h, 2, 20, 30, [["r", "x", None]], [["r", "x", []]])
        txn(h, 3, 40, 50, [["r", "x", None]], [["r", "x", [1]]])
        self.assertEqual(self.kinds(h, realtime=False), [])
        self.assertEqual(self.kinds(h), ["strict-serializability"])

    def test_a_lost_append_of_an_unknown_transaction_that_took_effect(self):
        # T1's outcome is unknown; a read shows its append to x, so its
        # append to y happened before that read completed.
        h = H()
        txn(h, 1, 0, 10, [["append", "x", 1], ["append", "y", 1]], kind=None)
        txn(h, 2, 20, 30, [["r", "x", None]], [["r", "x", [1]]])
        txn(h, 3, 40, 50, [["r", "y", None]], [["r", "y", []]])
        self.assertIn("lost-append", self.kinds(h))
        self.assertNotIn("lost-append", self.kinds(h, realtime=False))

    def test_ill_formed_transactions_are_refused(self):
        h = H()  # a completion whose micro-operations differ
        txn(h, 1, 0, 10, [["r", "x", None]], [["r", "y", []]])
        with self.assertRaisesRegex(ValueError, "line 2: .*differ"):
            listappend.check(h.ops())
        h = H()  # a completion changing the value appended
        txn(h, 1, 0, 10, [["append", "x", 1]], [["append", "x", 2]])
        with self.assertRaisesRegex(ValueError, "line 2: .*appends 2"):
            listappend.check(h.ops())
        h = H()  # a value appended twice (a failed attempt and its retry)
        txn(h, 1, 0, 10, [["append", "x", 1]], kind="fail")
        txn(h, 2, 20, 30, [["append", "x", 1]])
        with self.assertRaisesRegex(ValueError, "appended to key 'x' again"):
            listappend.check(h.ops())

    def test_an_unknown_transaction_counts_if_its_appends_were_seen(self):
        h = H()
        txn(h, 1, 0, 10, [["append", "x", 1]], kind=None)
        txn(h, 2, 20, 30, [["r", "x", None]], [["r", "x", [1]]])
        self.assertEqual(self.kinds(h), [])


class BankTest(unittest.TestCase):
    def kinds(self, h, **kw):
        return sorted({a.kind for a in bank.check(h.ops(), 100, **kw)})

    def test_transfers_keep_the_total(self):
        h = H().op(1, "read", None, None, 0, 1, value={"a": 50, "b": 50})
        h.op(2, "transfer", None, {"from": "a", "to": "b", "amount": 10}, 2, 3)
        h.op(1, "read", None, None, 4, 5, value={"a": 40, "b": 60})
        h.op(2, "transfer", None, {"from": "b", "to": "a", "amount": 5}, 6, 7, kind="fail")
        self.assertEqual(self.kinds(h), [])

    def test_a_debit_without_its_credit_breaks_the_total(self):
        h = H().op(1, "read", None, None, 0, 1, value={"a": 50, "b": 50})
        h.op(1, "read", None, None, 4, 5, value={"a": 40, "b": 50})
        self.assertEqual(self.kinds(h), ["wrong-total"])

    def test_missing_accounts_and_negative_balances(self):
        h = H().op(1, "read", None, None, 0, 1, value={"a": 50, "b": 50})
        h.op(1, "read", None, None, 2, 3, value={"a": 100})
        h.op(1, "read", None, None, 4, 5, value={"a": 110, "b": -10})
        self.assertEqual(self.kinds(h), ["negative-balance", "wrong-accounts"])
        self.assertEqual(self.kinds(h, allow_negative=True), ["wrong-accounts"])


class QueueTest(unittest.TestCase):
    def kinds(self, h, drained=True):
        return sorted({a.kind for a in queues.check(h.ops(), drained=drained)})

    def test_each_message_once(self):
        h = H().op(1, "enqueue", None, "m1", 0, 10).op(1, "enqueue", None, "m2", 11, 20)
        h.op(2, "dequeue", None, None, 5, 8, value=[])  # (delivery is asynchronous)
        h.op(2, "dequeue", None, None, 30, 40, value=["m2", "m1"])
        h.op(1, "enqueue", None, "m3", 41, 50, kind="info")  # unknown: either way
        self.assertEqual(self.kinds(h), [])

    def test_duplicates_phantoms_aborted_and_lost_messages(self):
        h = H().op(1, "enqueue", None, "m1", 0, 10).op(1, "enqueue", None, "m2", 11, 20,
                                                        kind="fail")
        h.op(1, "enqueue", None, "m3", 21, 30)
        h.op(2, "dequeue", None, None, 31, 40, value=["m1", "m2", "m9"])
        h.op(2, "dequeue", None, None, 41, 50, value=["m1"])
        self.assertEqual(self.kinds(h), ["aborted-delivery", "duplicate-delivery", "lost-message",
                                         "phantom-delivery"])
        self.assertNotIn("lost-message", self.kinds(h, drained=False))


class QueueReceiptTest(unittest.TestCase):
    """Receipts settle dequeues of unknown outcome."""

    def kinds(self, h):
        return sorted({a.kind for a in queues.check(h.ops(), drained=True)})

    def test_an_unknown_dequeue_with_a_receipt_delivered(self):
        h = H().op(1, "enqueue", None, "m1", 0, 10).op(1, "enqueue", None, "m2", 11, 20)
        h.op(2, "dequeue", None, "c1", 21, 30, kind="info", value=["m1"])
        h.op(3, "dequeue", None, "c2", 31, 40, value=["m2"])
        h.op(3, "receipts", None, None, 50, 60, value={"c1": ["m1"], "c2": ["m2"]})
        self.assertEqual(self.kinds(h), [])
        # Without its receipt, m1 was never delivered: lost.
        h = H().op(1, "enqueue", None, "m1", 0, 10)
        h.op(2, "dequeue", None, "c1", 21, 30, kind="info", value=["m1"])
        h.op(3, "receipts", None, None, 50, 60, value={})
        self.assertEqual(self.kinds(h), ["lost-message"])

    def test_receipts_of_failed_ok_and_twice_consumed_dequeues(self):
        h = H().op(1, "enqueue", None, "m1", 0, 10).op(1, "enqueue", None, "m2", 11, 20)
        h.op(2, "dequeue", None, "c1", 21, 30, kind="fail", value=["m1"])
        h.op(2, "dequeue", None, "c2", 31, 40, value=["m2"])  # its receipt is gone
        h.op(2, "dequeue", None, "c3", 41, 45, kind="info", value=["m1"])
        h.op(3, "receipts", None, None, 50, 60, value={"c1": ["m1"], "c3": ["m1"]})
        self.assertEqual(self.kinds(h), ["aborted-dequeue-visible", "duplicate-delivery",
                                         "lost-receipt"])
        h = H().op(1, "enqueue", None, "m1", 0, 10).op(1, "enqueue", None, "m2", 11, 20)
        h.op(2, "dequeue", None, "c1", 21, 30, value=["m1"])
        h.op(3, "receipts", None, None, 50, 60, value={"c1": ["m1", "m2"]})
        self.assertEqual(self.kinds(h), ["receipt-mismatch"])
        h = H().op(1, "enqueue", None, "m1", 0, 10).op(1, "settle", "g1", None, 11, 12)
        h.op(2, "dequeue", None, "c1", 21, 30, value=["m1"])
        h.op(3, "receipts", None, None, 50, 60, value={"c1": ["m1"], "c9": []})
        self.assertEqual(self.kinds(h), ["phantom-receipt"])


def account(balance, *ids):
    return {"balance": balance, "ledger": list(ids)}


class LedgerTest(unittest.TestCase):
    def kinds(self, h):
        return sorted({a.kind for a in ledger.check(h.ops(), 100)})

    def transfers(self, h):
        h.op(1, "transfer", None, {"id": "t1", "from": "a", "to": "b", "amount": 10}, 0, 10)
        h.op(1, "transfer", None, {"id": "t2", "from": "b", "to": "c", "amount": 5}, 11, 20,
             kind="fail")
        h.op(2, "transfer", None, {"id": "t3", "from": "c", "to": "a", "amount": 7}, 12, 25,
             kind="info")
        return h

    def settle(self, h, at=26):
        """The final phase's touches of every account's group."""
        for i, a in enumerate("abc"):
            h.op(4, "touch", "g", a, at + i, at + i + 1)
        return h

    def test_all_or_nothing_transfers_pass(self):
        h = self.settle(self.transfers(H()))
        h.op(3, "read", None, None, 5, 6, value={"a": account(100), "b": account(110, "t1")})
        h.op(3, "read", None, None, 30, 40, value={"a": account(97, "t1", "t3"),
                                                   "b": account(110, "t1"),
                                                   "c": account(93, "t3")})
        self.assertEqual(self.kinds(h), [])

    def test_half_applied_lost_and_aborted_transfers(self):
        h = self.settle(self.transfers(H()))
        h.op(3, "read", None, None, 30, 40, value={"a": account(90, "t1"), "b": account(100),
                                                   "c": account(100)})
        self.assertEqual(self.kinds(h), ["half-applied", "wrong-total"])
        # Before every group was settled by a touch, a group may still show
        # its state before a transfer's phase two: not judged.
        h = self.settle(self.transfers(H()), at=50)
        h.op(3, "read", None, None, 30, 40, value={"a": account(90, "t1"), "b": account(100),
                                                   "c": account(100)})
        self.assertEqual(self.kinds(h), [])
        h = self.settle(self.transfers(H()))
        h.op(3, "read", None, None, 30, 40, value={"a": account(100), "b": account(100),
                                                   "c": account(100)})
        self.assertEqual(self.kinds(h), ["lost-transfer"])
        h = self.settle(self.transfers(H()))
        h.op(3, "read", None, None, 30, 40, value={"a": account(90, "t1"),
                                                   "b": account(105, "t1", "t2"),
                                                   "c": account(105, "t2")})
        self.assertEqual(self.kinds(h), ["aborted-transfer-visible"])

    def test_a_balance_off_its_ledger_a_regressed_ledger_and_phantoms(self):
        h = self.transfers(H())
        h.op(3, "read", None, None, 21, 22, value={"b": account(110, "t1")})
        h.op(3, "read", None, None, 23, 24, value={"b": account(100)})  # t1 vanished
        h.op(3, "read", None, None, 25, 26, value={"c": account(100, "t9")})
        h.op(3, "read", None, None, 27, 28, value={"a": account(95, "t1")})
        h.op(3, "read", None, None, 29, 29, value={"c": account(100, "t1")})
        self.assertEqual(self.kinds(h), ["balance-ledger-mismatch", "ledger-forked",
                                         "ledger-regressed", "misplaced-transfer",
                                         "phantom-transfer"])

    def test_a_transfer_through_a_queue_is_in_flight_until_credited(self):
        h = H().op(1, "transfer", None, {"id": "q1", "from": "a", "to": "b", "amount": 10,
                                         "via": "queue"}, 0, 10)
        h.op(2, "read", None, None, 11, 12, value={"a": account(90, "q1"), "b": account(100)})
        h.op(2, "credit", None, {"account": "b"}, 13, 14, value={"account": "b",
                                                                  "credited": ["q1"]})
        for i, a in enumerate("ab"):
            h.op(4, "touch", "g", a, 15 + i, 16 + i)
        final = {"a": account(90, "q1"), "b": account(110, "q1")}
        self.assertEqual(self.kinds(h.op(2, "read", None, None, 20, 21, value=final)), [])
        # A credit that never arrived: half applied once everything settled.
        h = H().op(1, "transfer", None, {"id": "q1", "from": "a", "to": "b", "amount": 10,
                                         "via": "queue"}, 0, 10)
        for i, a in enumerate("ab"):
            h.op(4, "touch", "g", a, 15 + i, 16 + i)
        h.op(2, "read", None, None, 20, 21, value={"a": account(90, "q1"), "b": account(100)})
        self.assertEqual(self.kinds(h), ["half-applied", "wrong-total"])

    def test_two_reads_never_show_forked_ledgers(self):
        h = H()
        for i, tid in enumerate(("t1", "t2")):
            h.op(5 + i, "transfer", None, {"id": tid, "from": "a", "to": "b", "amount": 1}, 0, 10,
                 kind="info")
        h.op(2, "read", None, None, 11, 20, value={"b": account(101, "t1")})
        h.op(3, "read", None, None, 12, 21, value={"b": account(101, "t2")})  # overlapping
        self.assertEqual(self.kinds(h), ["ledger-forked"])

    def test_a_malformed_ledger_history_is_refused(self):
        h = H().op(1, "transfer", None, {"from": "a"}, 0, 10)
        with self.assertRaises(ValueError):
            ledger.check(h.ops(), 100)
        h = H().op(1, "read", None, None, 0, 10, value={"a": 100})
        with self.assertRaises(ValueError):
            ledger.check(h.ops(), 100)


class CommandTest(unittest.TestCase):
    def run_msck(self, lines, *flags):
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            f.write("\n".join(lines) + "\n")
        try:
            return subprocess.run([sys.executable, MSCK, *flags, f.name], capture_output=True,
                                  text=True, timeout=60)
        finally:
            os.unlink(f.name)

    def test_exit_status_says_the_verdict(self):
        good = H().op(1, "write", "x", 1, 0, 10).op(2, "read", "x", None, 20, 30, value=1)
        r = self.run_msck(sorted(good.lines, key=lambda l: json.loads(l)["time"]),
                          "--model=register")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("linearizable", r.stdout)
        bad = H().op(1, "write", "x", 1, 0, 10).op(2, "read", "x", None, 20, 30, value=None)
        r = self.run_msck(sorted(bad.lines, key=lambda l: json.loads(l)["time"]),
                          "--model=register")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("NOT linearizable", r.stdout)
        weak = H().op(1, "write", "x", 1, 0, 10).op(2, "read-snapshot", "x", None, 20, 30, value=7)
        r = self.run_msck(sorted(weak.lines, key=lambda l: json.loads(l)["time"]),
                          "--model=register")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("weak-read-phantom", r.stdout)

    def test_a_malformed_history_or_flag_is_refused(self):
        r = self.run_msck(["{not json"], "--model=register")
        self.assertEqual(r.returncode, 2)
        self.assertIn("line 1", r.stderr)
        r = self.run_msck(["{}"], "--model=bank")  # no --total
        self.assertEqual(r.returncode, 2)
        r = self.run_msck(["{}"], "--model=ledger")  # no --initial
        self.assertEqual(r.returncode, 2)
        r = self.run_msck(["{}"], "--model=stack")
        self.assertEqual(r.returncode, 2)
        r = self.run_msck(['{"process": 1, "type": "invoke", "f": "txn", "value": [["x"]], '
                           '"time": 1}'], "--model=list-append")
        self.assertEqual(r.returncode, 2)
        self.assertIn("micro-operation", r.stderr)
        r = self.run_msck(['{"process": 1, "type": "invoke", "f": "write", "key": "x", '
                           '"value": NaN, "time": 1}'], "--model=register")
        self.assertEqual(r.returncode, 2)
        self.assertIn("NaN", r.stderr)
        r = self.run_msck(['{"process": 1, "type": "invoke", "f": "write", "key": "x", '
                           '"value": ' + "[" * 50000 + "]" * 50000 + ', "time": 1}'],
                          "--model=register")
        self.assertEqual(r.returncode, 2)
        self.assertIn("line 1: nested too deeply", r.stderr)

    def test_a_failure_of_the_checker_is_not_a_verdict(self):
        import msck
        saved = register.check
        register.check = lambda ops, budget: 1 / 0
        try:
            with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
                f.write(H().op(1, "write", "x", 1, 0, 10).lines[0] + "\n")
            with open(os.devnull, "w") as devnull:
                saved_err, sys.stderr = sys.stderr, devnull
                try:
                    status = msck.main(["--model=register", f.name])
                finally:
                    sys.stderr = saved_err
            self.assertEqual(status, 4)
        finally:
            register.check = saved
            os.unlink(f.name)


if __name__ == "__main__":
    unittest.main()
