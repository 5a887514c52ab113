"""Seeded fault schedules, and injecting them into a running cluster.

A schedule is a list of faults, one at a time, each
{"at": seconds from the run's start, "kind": ..., "target": ..., "duration": seconds}
(and "amount" for the kinds that have one):

  kill      SIGKILL a process (a datacenter's storage process, one of a
            split datacenter's role processes — its lock service among
            them — or a gateway), restart it `duration` seconds later;
  pause     SIGSTOP every storage process of a datacenter, SIGCONT after
            `duration` seconds (some pauses outlast the 10 s coordinator
            lease);
  crash-dc  SIGKILL every storage process of a datacenter at once, restart
            them after `duration`;
  isolate   partition a datacenter from every other (both ways);
  cut       partition two datacenters ("A-B") from each other;
  one-way   one datacenter's packets to another ("A>B") are lost, the
            other way works;
  flaky     "amount" percent of the packets between two datacenters ("A-B")
            are lost, at random, both ways;
  clock     a process's wall clock jumps by "amount" seconds (forward or
            back) and jumps back when the fault ends (libfaketime; the
            monotonic clock is left alone);
  disk-full the disk of the datacenter whose data is on a small tmpfs
            fills up (a ballast file takes every free byte), then frees;
  slow-disk every read, write and fsync of a datacenter's storage
            processes on their files takes "amount" ms longer (a preloaded
            library, libmsslowio), then is fast again.

The same seed and the same cluster give the same schedule, so a failing
run is replayed by its seed, or exactly by the schedule saved with it.
"""

import json
import os
import threading

PROCESS_KINDS = ("kill", "pause", "crash-dc")
NETWORK_KINDS = ("isolate", "cut", "one-way", "flaky")
KINDS = PROCESS_KINDS + NETWORK_KINDS + ("clock", "disk-full", "slow-disk")


class ScheduleError(Exception):
    pass


def _pair(rng, names, sep):
    a, b = rng.sample(names, 2)
    return f"{a}{sep}{b}"


def _draw(rng, cluster, kind):
    """(target, duration, amount) of one fault of `kind`."""
    storage = [n for n in cluster.processes if not n.endswith("/gateway")]
    gateways = [n for n in cluster.processes if n.endswith("/gateway")]
    names = cluster.names
    amount = None
    if kind == "kill":
        target = rng.choice(storage + storage + gateways)  # storage twice as often
        duration = rng.uniform(0.5, 6.0)
    elif kind == "pause":
        target = rng.choice(names)
        duration = rng.choice([rng.uniform(1.0, 5.0), rng.uniform(10.0, 14.0)])
    elif kind == "crash-dc":
        target = rng.choice(names)
        duration = rng.uniform(1.0, 6.0)
    elif kind == "isolate":
        target = rng.choice(names)
        duration = rng.choice([rng.uniform(1.0, 6.0), rng.uniform(10.0, 16.0)])
    elif kind in ("cut", "flaky"):
        target = _pair(rng, names, "-")
        duration = rng.uniform(2.0, 10.0)
        if kind == "flaky":
            amount = rng.choice([10, 25, 50])
    elif kind == "one-way":
        target = _pair(rng, names, ">")
        duration = rng.uniform(2.0, 10.0)
    elif kind == "clock":
        target = rng.choice(storage + gateways)
        amount = rng.choice([-1, 1]) * rng.choice([1, 3, 8, 30, 120])
        duration = rng.uniform(2.0, 8.0)
    elif kind == "slow-disk":
        target = rng.choice(names)
        amount = rng.choice([2, 10, 50])
        duration = rng.uniform(2.0, 10.0)
    else:  # disk-full
        target = cluster.disk_dc
        duration = rng.uniform(2.0, 8.0)
    return target, round(duration, 2), amount


def make_schedule(rng, cluster, seconds, kinds=KINDS, warmup=2.0, recovery=4.0):
    """Faults from `warmup` until `recovery` seconds before the end."""
    kinds = list(kinds)
    schedule = []
    t = warmup
    tries = 0
    while kinds and tries < 20:
        kind = rng.choice(kinds)
        target, duration, amount = _draw(rng, cluster, kind)
        if t + duration > seconds - recovery:
            tries += 1  # too long for what is left: draw again
            continue
        fault = {"at": round(t, 2), "kind": kind, "target": target, "duration": duration}
        if amount is not None:
            fault["amount"] = amount
        schedule.append(fault)
        t += duration + rng.uniform(1.0, 4.0)
    return schedule


def _targets_of(kind, cluster):
    names = cluster.names
    if kind in ("kill", "clock"):
        return set(cluster.processes)
    if kind in ("pause", "crash-dc", "isolate", "slow-disk"):
        return set(names)
    if kind in ("cut", "flaky"):
        return {f"{a}-{b}" for a in names for b in names if a != b}
    if kind == "one-way":
        return {f"{a}>{b}" for a in names for b in names if a != b}
    return {cluster.disk_dc} if cluster.disk_dc else set()


def validate(schedule, cluster):
    """Checks a schedule read from a file (a replay) before it is used."""
    if not isinstance(schedule, list):
        raise ScheduleError("a schedule is a JSON list of faults")
    for i, f in enumerate(schedule):
        needed = {"at", "kind", "target", "duration"}
        if not isinstance(f, dict) or not needed <= set(f) or set(f) - needed - {"amount"}:
            raise ScheduleError(f"fault {i}: needs exactly at, kind, target, duration "
                                f"(and amount for flaky, clock and slow-disk)")
        if f["kind"] not in KINDS:
            raise ScheduleError(f"fault {i}: kind {f['kind']!r} is none of {', '.join(KINDS)}")
        for field in ("at", "duration"):
            v = f[field]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 86400:
                raise ScheduleError(f"fault {i}: {field} must be seconds in [0, 86400]")
        targets = _targets_of(f["kind"], cluster)
        if f["target"] not in targets:
            raise ScheduleError(f"fault {i}: no target {f['target']!r} for {f['kind']} in this "
                                f"cluster (one of {', '.join(sorted(targets)) or 'none'})")
        amount = f.get("amount")
        if f["kind"] in ("flaky", "clock", "slow-disk"):
            lo, hi = {"flaky": (1, 100), "clock": (-86400, 86400),
                      "slow-disk": (1, 10000)}[f["kind"]]
            if isinstance(amount, bool) or not isinstance(amount, int) or not lo <= amount <= hi:
                raise ScheduleError(f"fault {i}: {f['kind']} needs an integer amount in "
                                    f"[{lo}, {hi}]")
        elif amount is not None:
            raise ScheduleError(f"fault {i}: {f['kind']} takes no amount")


def write_control(path, offset):
    """Writes a control file (libfaketime's offset, libmsslowio's delay)
    whole: a reader never sees it empty."""
    tmp = path + ".tmp"
    with open(tmp, "w") as out:
        out.write(offset + "\n")
    os.replace(tmp, path)


class Injector(threading.Thread):
    """Runs a schedule against a cluster; records each fault's window
    (times on the run's clock, ns) in `windows`."""

    def __init__(self, cluster, schedule, clock, stop, log):
        super().__init__(daemon=True)
        self.cluster = cluster
        self.schedule = schedule
        self.clock = clock  # () -> ns since the run began
        self.stop = stop  # threading.Event: the run is ending
        self.log = log
        self.windows = []  # [{"kind", "target", "start", "end"}]
        self.error = None

    def _sleep_until(self, seconds):
        while not self.stop.is_set():
            left = seconds - self.clock() / 1e9
            if left <= 0:
                return True
            self.stop.wait(min(left, 0.2))
        return False

    def run(self):
        try:
            for f in self.schedule:
                if not self._sleep_until(f["at"]):
                    return
                label = f["target"] if "amount" not in f else f"{f['target']} {f['amount']:+d}"
                window = {"kind": f["kind"], "target": label, "start": self.clock()}
                self.windows.append(window)
                self.log(f"fault: {f['kind']} {f['target']} for {f['duration']} s")
                undo = self._apply(f)
                self._sleep_until(f["at"] + f["duration"])
                undo()
                self.log("healed")
                window["end"] = self.clock()
        except Exception as e:  # noqa: BLE001 - reported by the runner as a run error
            self.error = f"{type(e).__name__}: {e}"

    def _apply(self, f):
        """Injects fault `f`; returns what heals it."""
        kind, target, c = f["kind"], f["target"], self.cluster
        if kind in PROCESS_KINDS:
            procs = ([c.processes[target]] if kind == "kill" else c.storage_processes(target))
            for p in procs:
                if kind == "pause":
                    p.pause()
                else:
                    p.kill()

            def restart():
                for p in procs:
                    if p.paused:
                        p.resume()
                    elif not p.alive():
                        p.start(timeout=60)
            return restart
        if kind in NETWORK_KINDS:
            net = c.network
            if kind == "isolate":
                for other in c.names:
                    if other != target:
                        net.drop(other, target)
                        net.drop(target, other)
            elif kind == "one-way":
                a, b = target.split(">")
                net.drop(b, a)
            else:
                a, b = target.split("-")
                pct = f.get("amount", 100)
                net.drop(a, b, pct)
                net.drop(b, a, pct)
            return net.heal
        if kind == "clock":
            path = c.clock_file(target)
            write_control(path, f"{f['amount']:+d}s")
            return lambda: write_control(path, "+0")
        if kind == "slow-disk":
            paths = [c.slowio_file(p.name) for p in c.storage_processes(target)]
            for path in paths:
                write_control(path, str(f["amount"] * 1000))  # microseconds per I/O call

            def fast_again():
                for path in paths:
                    write_control(path, "0")
            return fast_again
        # disk-full: a ballast file takes every free byte of the tmpfs.
        path = c.ballast_path()
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
        try:
            st = os.statvfs(os.path.dirname(path))
            chunk = st.f_bavail * st.f_frsize
            while chunk >= 4096:
                try:
                    os.posix_fallocate(fd, os.lseek(fd, 0, os.SEEK_END), chunk)
                except OSError:
                    chunk //= 2  # less is free than asked (writes meanwhile): ask for less
        finally:
            os.close(fd)

        def free_disk():
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        return free_disk

    def heal_all(self):
        """After the schedule: every link whole, every clock right, the
        disk free, every process running and resumed."""
        for w in self.windows:
            w.setdefault("end", self.clock())
        c = self.cluster
        if c.network:
            c.network.heal()
        if c.faketime:
            for name in c.processes:
                write_control(c.clock_file(name), "+0")
        if c.slowio:
            for name in c.processes:
                if not name.endswith("/gateway"):
                    write_control(c.slowio_file(name), "0")
        if c.disk_dc:
            try:
                os.unlink(c.ballast_path())
            except FileNotFoundError:
                pass
        for p in self.cluster.processes.values():
            if p.paused:
                p.resume()
        for p in self.cluster.processes.values():
            if not p.alive():
                p.start(timeout=60)


def load(path):
    with open(path) as f:
        try:
            return json.load(f)
        except ValueError as e:
            raise ScheduleError(f"{path}: not JSON ({e})") from None

