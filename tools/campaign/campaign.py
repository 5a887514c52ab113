"""The fault campaign's runner: clusters of real megastored processes,
client workloads through the gateway, a seeded fault schedule, every
operation recorded, and the history checked by msck (which shares no code
with the system). docs/campaign.md says how to run it and what it checks.
"""

import argparse
import collections
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cluster as clusterlib  # noqa: E402
import faults  # noqa: E402
import network  # noqa: E402
import report  # noqa: E402
import workloads  # noqa: E402

MSCK = os.path.join(HERE, "checker", "msck.py")


class Recorder:
    """The history: events in the order their times were taken."""

    def __init__(self):
        self.lock = threading.Lock()
        self.events = []
        self.t0 = time.monotonic_ns()
        self.pids = 0

    def clock(self):
        return time.monotonic_ns() - self.t0

    def new_process(self):
        with self.lock:
            self.pids += 1
            return self.pids

    def add(self, event):
        with self.lock:
            event["time"] = self.clock()
            self.events.append(event)

    def write(self, path):
        with open(path, "w") as f:
            for e in self.events:
                f.write(json.dumps(e, separators=(",", ":")) + "\n")


def run_op(rec, workload, gw, process, dc, f, key, value):
    inv = {"process": process, "type": "invoke", "f": f, "value": value, "dc": dc}
    if key is not None:
        inv["key"] = key
    rec.add(inv)
    try:
        kind, result, error = workload.run(gw, f, key, value)
    except Exception as e:  # noqa: BLE001 - a client bug: outcome unknown, say so
        kind, result, error = "info", value, f"client error {type(e).__name__}: {e}"
    done = {"process": process, "type": kind, "f": f, "value": result, "dc": dc}
    if key is not None:
        done["key"] = key
    if error:
        done["error"] = error[:300]
    rec.add(done)
    return kind, error or ""


def client(rec, workload, seed, index, gateway, stop, timeout, tls):
    rng = random.Random(f"{seed}-client-{index}")
    dc, host, port = gateway
    gw = workloads.Gateway(host, port, timeout, tls)
    process = rec.new_process()
    while not stop.is_set():
        f, key, value = workload.next_op(rng)
        kind, error = run_op(rec, workload, gw, process, dc, f, key, value)
        if kind == "info":
            process = rec.new_process()
        if kind != "ok" and "conflict" not in error:
            # The gateway is down or failing: back off rather than spin
            # (a spinning client would fill the history with refusals).
            stop.wait(0.2 if "refused" in error else 0.05)
    gw.close()


def final_phase(rec, workload, cluster_, timeout, deadline_s=90):
    """Once everything healed: each final operation until it succeeds."""
    dc, host, port = cluster_.gateways()[0]
    gw = workloads.Gateway(host, port, timeout, cluster_.tls)
    problems = []
    for f, key, value in workload.final_ops():
        end = time.monotonic() + deadline_s
        while True:
            process = rec.new_process()
            if run_op(rec, workload, gw, process, dc, f, key, value)[0] == "ok":
                break
            if time.monotonic() > end:
                problems.append(f"final {f} {key or ''} did not succeed in {deadline_s} s")
                break
            time.sleep(0.5)
            value = workload.retry_value(f, key, value)
    gw.close()
    return problems


def _status_of(error):
    """The HTTP status an error line starts with, or None."""
    head = error.split(" ", 1)[0]
    return int(head) if head.isdigit() else None


# Statuses that never come from a healthy cluster serving this workload: a
# run that sees them tested nothing (a runner or schema bug).
IMPOSSIBLE = {401, 404, 405, 413}
CLOCK_REFUSAL = "beyond this clock"  # the 400 a writer gives after a read from its future


def _judge_operations(ops, final_from, summary):
    """Problems the history shows besides anomalies: no commit succeeded
    before the final reads, statuses that mean the test itself is broken,
    client-side errors."""
    problems = []
    commits_ok = sum(1 for o in ops if o[0] < final_from and o[3] == "ok" and
                     workloads.is_commit(o[2], o[4]))
    summary["commits_ok"] = commits_ok
    if commits_ok == 0:
        problems.append("no commit succeeded before the final reads")
    statuses = {}
    for o in ops:
        if o[3] == "ok" or not o[6]:
            continue
        code = _status_of(o[6])
        key = str(code) if code else o[6].split(":", 1)[0][:40]
        statuses[key] = statuses.get(key, 0) + 1
        if code in IMPOSSIBLE or (code == 400 and CLOCK_REFUSAL not in o[6]):
            problems.append(f"a request answered {o[6][:200]}")
        elif o[6].startswith("client error") or o[6].startswith("gateway answered"):
            problems.append(o[6][:200])
    summary["errors_by_kind"] = statuses
    # One line per kind of problem is enough.
    seen, out = set(), []
    for p_ in problems:
        k = re.sub(r"\d+", "N", p_)[:60]
        if k not in seen:
            seen.add(k)
            out.append(p_)
    return out


def plan(seed, topology, workload, kinds, tls="auto"):
    """A run's topology, workload, full-disk datacenter (None without disk
    faults) and whether it runs TLS (half the runs, unless `tls` is "on" or
    "off"), from its seed. Each is drawn whether or not a flag fixes it, so
    a replay that names the topology and workload draws the same
    datacenter."""
    rng = random.Random(f"{seed}-plan")
    drawn_topology = rng.choice(sorted(clusterlib.TOPOLOGIES))
    drawn_workload = rng.choice(sorted(workloads.WORKLOADS))
    topology = topology or drawn_topology
    workload = workload or drawn_workload
    names = [chr(ord("A") + i) for i in range(len(clusterlib.TOPOLOGIES[topology][0]))]
    disk_dc = rng.choice(names) if "disk-full" in kinds else None
    drawn_tls = rng.random() < 0.5
    return topology, workload, disk_dc, drawn_tls if tls == "auto" else tls == "on"


def one_run(args, seed, out_dir, schedule_file=None):
    """One run; returns its summary dict. Whatever goes wrong in the run
    becomes one of its problems (verdict "error"), never an exception."""
    began = time.monotonic()
    topology, workload_name, disk_dc, tls = plan(seed, args.topology, args.workload,
                                                 args.fault_kinds, args.tls)
    run_dir = os.path.join(out_dir, f"run-{seed}")
    if os.path.exists(run_dir):
        shutil.rmtree(run_dir)
    os.makedirs(run_dir)
    summary = {"seed": seed, "topology": topology, "workload": workload_name, "tls": tls,
               "seconds": args.seconds, "clients": args.clients, "verdict": "error",
               "problems": [], "ops": 0, "faults": {}, "availability": [], "dir": run_dir}
    kinds_flag = ",".join(args.fault_kinds) or "none"
    replay = (f"tools/campaign/campaign --seed={seed} --runs=1 --seconds={args.seconds} "
              f"--clients={args.clients} --topology={topology} --workload={workload_name} "
              f"--faults={kinds_flag} --tls={'on' if tls else 'off'} "
              f"--schedule={os.path.join(run_dir, 'schedule.json')}")
    if workload_name == "register" and args.register_read_level != "mixed":
        replay += f" --register-read-level={args.register_read_level}"
    summary["replay"] = replay

    def log(msg):
        if args.verbose:
            print(f"  [{seed}] {msg}", flush=True)

    phases = summary["phases"] = {}
    mark = [time.monotonic()]

    def phase(name):
        now = time.monotonic()
        phases[name] = round(now - mark[0], 2)
        mark[0] = now
        log(f"{name}: {phases[name]} s")

    rec = Recorder()
    stop = threading.Event()
    threads = []
    injector = None
    net = None
    c = None
    workload = None
    run_ns = 0
    final_from = math.inf
    try:
        # The environment follows the fault kinds asked for (a replay asks
        # for the same ones), so a saved schedule runs as it first did.
        names = [chr(ord("A") + i) for i in range(len(clusterlib.TOPOLOGIES[topology][0]))]
        kinds = set(args.fault_kinds)
        if kinds & set(faults.NETWORK_KINDS):
            net = network.Network(network.new_tag(), names)
        schema = clusterlib.compile_schema(args.bin, run_dir)
        c = clusterlib.Cluster(topology, run_dir, args.bin, random.Random(f"{seed}-ports"),
                               schema, network=net, faketime="clock" in kinds, disk_dc=disk_dc,
                               tls=tls, slowio="slow-disk" in kinds)
        if schedule_file:
            schedule = faults.load(schedule_file)
            faults.validate(schedule, c)
            extra = {f["kind"] for f in schedule} - kinds
            if extra:
                raise faults.ScheduleError(f"the schedule has {', '.join(sorted(extra))} "
                                           f"faults: give --faults={kinds_flag} with them")
        else:
            schedule = faults.make_schedule(random.Random(f"{seed}-schedule"), c, args.seconds,
                                            args.fault_kinds)
        with open(os.path.join(run_dir, "schedule.json"), "w") as f:
            json.dump(schedule, f, indent=1)
        workload = workloads.WORKLOADS[workload_name]()
        if workload_name == "register":
            workload.read_level = args.register_read_level
        clients = args.clients * len(c.names)
        summary["clients"] = clients

        log(f"starting {topology} for {workload_name}")
        if net:
            net.setup()
        c.start()
        setup_gw = workloads.Gateway(*c.gateways()[0][1:], args.timeout, c.tls)
        try:
            workload.setup(setup_gw)
        except (workloads.Sent, workloads.NotSent) as e:
            raise RuntimeError(f"workload setup: {e}") from None
        finally:
            setup_gw.close()
        phase("start")
        rec.t0 = time.monotonic_ns()
        for i in range(clients):
            t = threading.Thread(target=client, args=(rec, workload, seed, i,
                                                      c.gateways()[i % len(c.names)], stop,
                                                      args.timeout, c.tls), daemon=True)
            t.start()
            threads.append(t)
        injector = faults.Injector(c, schedule, rec.clock, threading.Event(), log)
        injector.start()
        while rec.clock() < args.seconds * 1e9:
            time.sleep(0.1)
        injector.stop.set()
        injector.join()  # its restarts are bounded (60 s each)
        if injector.error:
            summary["problems"].append(f"fault injection: {injector.error}")
        phase("faults")
        injector.heal_all()
        c.wait_healthy(120)
        time.sleep(1.0)
        stop.set()
        for t in threads:
            t.join(args.timeout + 5)
        stuck = sum(1 for t in threads if t.is_alive())
        if stuck:
            summary["problems"].append(f"{stuck} client threads still waiting "
                                       f"{args.timeout + 5:g} s after the run ended")
        phase("heal")
        final_from = rec.clock()
        summary["problems"] += final_phase(rec, workload, c, args.timeout)
        phase("final reads")
        run_ns = rec.clock()
        summary["problems"] += c.crashes()
        summary["problems"] += c.stop()
        summary["lease_exits"] = c.lease_exits()
        phase("stop")
    except faults.ScheduleError:
        raise  # a bad --schedule: main says so (status 2)
    except Exception as e:  # noqa: BLE001 - the run is an error, the campaign goes on
        summary["problems"].append(f"{type(e).__name__}: {e}")
        run_ns = rec.clock()
    finally:
        stop.set()
        for t in threads:
            t.join(args.timeout + 5)
        if c is not None:
            summary["problems"] += c.crashes()
            c.kill_all()
            if sys.exc_info()[0] is not None:
                c.unmount_disk()  # interrupted: leave nothing mounted
        if net:
            net.teardown()
    history_path = os.path.join(run_dir, "history.jsonl")
    rec.write(history_path)
    windows = injector.windows if injector else []
    for w in windows:
        summary["faults"][w["kind"]] = summary["faults"].get(w["kind"], 0) + 1
    ops = report.operations(rec.events)
    summary["ops"] = len(ops)
    summary["ok_ops"] = sum(1 for o in ops if o[3] == "ok")
    if workload is not None and ops:
        summary["problems"] += _judge_operations(ops, final_from, summary)
        mark[0] = time.monotonic()
        check = subprocess.run([sys.executable, MSCK, *workload.msck_args(), history_path],
                               capture_output=True, text=True)
        check_text = (f"$ checker/msck.py {' '.join(workload.msck_args())} history.jsonl\n" +
                      check.stdout + check.stderr)
        phase("check")
    else:
        check = None
        check_text = "(no history to check)"
    with open(os.path.join(run_dir, "msck.txt"), "w") as f:
        f.write(check_text)
    summary["msck_status"] = check.returncode if check else None
    if check is not None and check.returncode == 1:
        summary["verdict"] = "ANOMALY"
    elif check is not None and check.returncode != 0:
        summary["problems"].append(f"msck exit {check.returncode}: {check_text.strip()[-300:]}")
    elif check is not None and not summary["problems"]:
        summary["verdict"] = "ok"
    summary["availability"] = report.availability(ops, windows, workloads.is_commit)
    with open(os.path.join(run_dir, "latency.svg"), "w") as f:
        f.write(report.latency_svg(ops, windows, run_ns))
    with open(os.path.join(run_dir, "report.md"), "w") as f:
        f.write(report.markdown(summary, ops, summary["availability"], check_text, replay))
    # The data stays for runs that are not ok (the tmpfs's copied out first).
    if c is not None:
        if summary["verdict"] != "ok" or args.keep:
            c.save_disk()
        c.unmount_disk()
    if summary["verdict"] == "ok" and not args.keep:
        shutil.rmtree(os.path.join(run_dir, "data"), ignore_errors=True)
        shutil.rmtree(os.path.join(run_dir, "cores"), ignore_errors=True)
    summary["wall_s"] = round(time.monotonic() - began, 1)
    with open(os.path.join(run_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return summary


def campaign_summary(runs, out_dir, command):
    """The whole campaign: runs, operations, faults by kind, anomalies, and
    availability under each kind of fault."""
    by_kind = {}
    for r in runs:
        for a in r["availability"]:
            k = by_kind.setdefault(a["kind"], {"n": 0, "ops": 0, "ok": 0, "first": [],
                                               "secs": 0.0})
            k["n"] += 1
            k["secs"] += a["seconds"]
            k["ops"] += a["ops"]
            k["ok"] += a["ok"]
            if a["first_commit_s"] is not None:
                k["first"].append(a["first_commit_s"])
    calm = by_kind.pop("none", None)
    if calm:  # the time outside every fault
        calm["secs"] = sum(r.get("seconds", 0) for r in runs if r["availability"]) - sum(
            k["secs"] for k in by_kind.values())
    fault_counts = ", ".join(f"{kind} {k['n']}" for kind, k in sorted(by_kind.items()))
    workloads_ = {}
    for r in runs:
        w = workloads_.setdefault(r["workload"], [0, 0])
        w[0] += 1
        w[1] += r["ops"]
    verdicts = {}
    for r in runs:
        verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
    lines = ["# Campaign summary", "", f"`{command}`", "",
             f"* runs: {len(runs)} ({', '.join(f'{v}: {n}' for v, n in sorted(verdicts.items()))})",
             f"* client operations: {sum(r['ops'] for r in runs):,} "
             f"({sum(r.get('ok_ops', 0) for r in runs):,} ok)",
             f"* by workload: " + ", ".join(f"{w} {n} runs, {ops:,} ops"
                                           for w, (n, ops) in sorted(workloads_.items())),
             f"* by topology: " + ", ".join(
                 f"{t} {n}" for t, n in sorted(collections.Counter(
                     r["topology"] for r in runs).items())) +
             f"; with TLS: {sum(1 for r in runs if r.get('tls'))}",
             f"* faults injected: {sum(k['n'] for k in by_kind.values())} ({fault_counts})",
             f"* wall time: {sum(r.get('wall_s', 0) for r in runs) / 60:.1f} min", "",
             "Availability: operations invoked while each kind of fault lasted (conflicts "
             "left out), the share that succeeded, and the time from a fault's start to the "
             "first successful commit invoked after it.", "",
             "| fault | windows | seconds | ops invoked during | ok share | ok ops/s | "
             "first commit after (median, max) |",
             "|---|---|---|---|---|---|---|"]

    def rate(k):
        return f"{k['ok'] / k['secs']:.0f}" if k["secs"] > 0 else "—"

    if calm and calm["ops"]:
        lines.append(f"| no fault | — | {calm['secs']:.0f} | {calm['ops']} | "
                     f"{100 * calm['ok'] / calm['ops']:.1f}% | {rate(calm)} | — |")
    for kind, k in sorted(by_kind.items()):
        first = sorted(k["first"])
        med = f"{first[len(first) // 2]:.2f} s" if first else "—"
        mx = f"{first[-1]:.2f} s" if first else "—"
        share = f"{100 * k['ok'] / k['ops']:.1f}%" if k["ops"] else "—"
        lines.append(f"| {kind} | {k['n']} | {k['secs']:.0f} | {k['ops']} | {share} | "
                     f"{rate(k)} | {med}, {mx} |")
    lines += ["", "| run | workload | topology | ops | faults | verdict |", "|---|---|---|---|---|---|"]
    for r in runs:
        nf = sum(r["faults"].values())
        lines.append(f"| [{r['seed']}](run-{r['seed']}/report.md) | {r['workload']} | "
                     f"{r['topology']} | {r['ops']} | {nf} | {r['verdict']} |")
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(runs, f, indent=1)


def unusable(kinds, bin_dir):
    """The fault kinds this host cannot inject, with why."""
    out = {}
    net_ok, why = network.available()
    for k in kinds:
        if k in faults.NETWORK_KINDS and not net_ok:
            out[k] = why
        elif k == "clock" and not os.path.exists(clusterlib.FAKETIME_LIB):
            out[k] = "no libfaketime (./ms deps installs faketime)"
        elif k == "slow-disk" and not os.path.exists(clusterlib.slowio_lib(bin_dir)):
            out[k] = f"no {clusterlib.slowio_lib(bin_dir)} (./ms build makes it)"
        elif k == "disk-full" and os.geteuid() != 0:
            out[k] = "not root (the disk is a tmpfs the runner mounts)"
    return out


def parse_args(argv):
    repo = os.path.dirname(os.path.dirname(HERE))
    p = argparse.ArgumentParser(
        prog="campaign",
        description="Runs megastore clusters as processes under a seeded fault schedule, "
                    "records every client operation and checks the histories "
                    "(docs/campaign.md).",
        epilog="Exit status: 0 every run passed; 1 a run found an anomaly; 2 bad flags; "
               "3 a run could not be carried out (a cluster did not start, a final read "
               "never succeeded, a process died on its own, the checker gave no verdict).")
    p.add_argument("--runs", type=int, default=1, help="how many runs (default 1)")
    p.add_argument("--seed", type=int, default=None,
                   help="the first run's seed; run i uses seed+i (default: from the clock, "
                        "printed)")
    p.add_argument("--seconds", type=float, default=30.0,
                   help="each run's length before the final reads (default 30)")
    p.add_argument("--clients", type=int, default=3,
                   help="client threads per datacenter's gateway (default 3)")
    p.add_argument("--workload", choices=sorted(workloads.WORKLOADS),
                   help="the workload of every run (default: chosen by each run's seed)")
    p.add_argument("--topology", choices=sorted(clusterlib.TOPOLOGIES),
                   help="the cluster of every run (default: chosen by each run's seed)")
    p.add_argument("--tls", choices=["auto", "on", "off"], default="auto",
                   help="mutual TLS between the cluster's processes and to its gateways: on, "
                        "off, or auto (default: half the runs, chosen by seed)")
    p.add_argument("--faults", default="",
                   help=f"comma-separated fault kinds to draw from (default all: "
                        f"{','.join(faults.KINDS)}); 'none' for no faults")
    p.add_argument("--register-read-level", default="mixed",
                   choices=["mixed", "current", "snapshot", "inconsistent"],
                   help="the register workload's reads: mixed (default: every level, current "
                        "reads checked for linearizability, the others for their own "
                        "guarantees), or all at one level and checked as linearizable — "
                        "snapshot and inconsistent are not, so the checker should find stale "
                        "reads: a check of the checker")
    p.add_argument("--schedule", help="replay this saved schedule.json exactly (one run)")
    p.add_argument("--timeout", type=float, default=15.0,
                   help="seconds a client waits for one request (default 15; the gateway's "
                        "own deadline is 10)")
    p.add_argument("--bin", default=os.path.join(repo, "build", "bin"),
                   help="where megastored, msadmin and msc are (default build/bin)")
    p.add_argument("--out", default=os.path.join(repo, "build", "campaign"),
                   help="where runs are written (default build/campaign)")
    p.add_argument("--keep", action="store_true",
                   help="keep the data directories of passing runs too")
    p.add_argument("-v", "--verbose", action="store_true", help="print faults as they happen")
    args = p.parse_args(argv)
    if not 1 <= args.runs <= 100000:
        p.error("--runs must be in [1, 100000]")
    if not 2 <= args.seconds <= 86400:
        p.error("--seconds must be in [2, 86400]")
    if not 1 <= args.clients <= 64:
        p.error("--clients must be in [1, 64]")
    if not 1 <= args.timeout <= 3600:
        p.error("--timeout must be in [1, 3600]")
    if args.seed is not None and not 0 <= args.seed < 2**62:
        p.error("--seed must be in [0, 2^62)")
    # Processes start inside network namespaces and with their own working
    # directories: a relative --bin would name nothing there.
    args.bin = os.path.abspath(args.bin)
    if args.faults == "none":
        args.fault_kinds = []
    elif args.faults:
        args.fault_kinds = args.faults.split(",")
        for k in args.fault_kinds:
            if k not in faults.KINDS:
                p.error(f"--faults: {k!r} is none of {', '.join(faults.KINDS)}, or none")
        for k, why in unusable(args.fault_kinds, args.bin).items():
            p.error(f"--faults: {k} cannot be injected here: {why}")
    else:
        args.skipped = unusable(faults.KINDS, args.bin)
        args.fault_kinds = [k for k in faults.KINDS if k not in args.skipped]
    if args.schedule:
        if args.runs != 1:
            p.error("--schedule replays one run: give --runs=1")
        if args.seed is None:
            p.error("--schedule needs the --seed of the run it replays")
        if not os.path.isfile(args.schedule):
            p.error(f"--schedule: no file {args.schedule}")
    for tool in ("megastored", "msadmin", "msc"):
        if not os.access(os.path.join(args.bin, tool), os.X_OK):
            p.error(f"--bin: no {tool} in {args.bin} (build first: ./ms build)")
    return args


def main(argv):
    args = parse_args(argv)
    for k, why in getattr(args, "skipped", {}).items():
        print(f"campaign: no {k} faults: {why}", flush=True)
    if os.geteuid() == 0:
        network.clean_stale()
    seed = args.seed if args.seed is not None else int(time.time() * 1000) % 1_000_000_000
    out_dir = os.path.abspath(args.out)
    os.makedirs(out_dir, exist_ok=True)
    command = "tools/campaign/campaign " + " ".join(argv)
    print(f"campaign: {args.runs} run(s) from seed {seed}, {args.seconds:g} s each, "
          f"writing {out_dir}", flush=True)
    runs = []

    def interrupted(signum, frame):
        # Once: a second signal must not cut the clean-up short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)
    try:
        return _campaign(args, seed, out_dir, command, runs)
    except KeyboardInterrupt:
        print(f"campaign: interrupted after {len(runs)} runs; every process stopped and "
              f"namespace removed", file=sys.stderr)
        if runs:
            campaign_summary(runs, out_dir, command)
        return 130


def _campaign(args, seed, out_dir, command, runs):
    status = 0
    for i in range(args.runs):
        s = seed + i
        try:
            summary = one_run(args, s, out_dir, args.schedule)
        except faults.ScheduleError as e:
            print(f"campaign: --schedule: {e}", file=sys.stderr)
            return 2
        except Exception as e:  # noqa: BLE001 - a runner bug: this run is an error
            traceback.print_exc()
            summary = {"seed": s, "topology": "?", "workload": "?", "verdict": "error",
                       "problems": [f"the runner failed: {type(e).__name__}: {e}"], "ops": 0,
                       "faults": {}, "availability": [], "dir": os.path.join(out_dir, f"run-{s}"),
                       "replay": f"tools/campaign/campaign --seed={s} --runs=1"}
        runs.append(summary)
        nf = sum(summary["faults"].values())
        print(f"run {s}: {summary['verdict']}: {summary['workload']} on {summary['topology']}"
              f"{' (TLS)' if summary.get('tls') else ''}, "
              f"{summary['ops']} ops ({summary.get('ok_ops', 0)} ok), {nf} faults "
              f"— {os.path.join(summary['dir'], 'report.md')}", flush=True)
        for prob in summary["problems"]:
            print(f"    problem: {prob}", flush=True)
        if summary["verdict"] != "ok":
            print(f"    replay: {summary['replay']}", flush=True)
            status = 1 if summary["verdict"] == "ANOMALY" or status == 1 else 3
        campaign_summary(runs, out_dir, command)
    total = sum(r["ops"] for r in runs)
    bad = sum(1 for r in runs if r["verdict"] != "ok")
    print(f"campaign: {len(runs)} runs, {total:,} operations, {bad} not ok — "
          f"{os.path.join(out_dir, 'summary.md')}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
