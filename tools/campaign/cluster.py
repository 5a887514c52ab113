"""A megastore cluster as separate processes on this host, for the campaign.

Each datacenter runs as one `megastored --config --datacenter` process (or,
for a split datacenter, one process per role: tablet+lock, coordinator,
replication; for a datacenter whose Bigtable is a cell, the cell's lock
service, two masters and two tablet servers besides the datacenter's own
process), plus a gateway process of its own (`--roles=gateway`) that
clients talk to, so that killing a datacenter's storage does not take its
clients' endpoint with it. Ports are picked free on 127.0.0.1 and written
into a generated config; every process's output goes to a log file in the
run's directory.
"""

import os
import queue
import resource
import shutil
import signal
import socket
import subprocess
import threading
import time

# One-way delays of the emulated WAN, ms, between datacenters by index.
LINK_MS = {(0, 1): 2, (0, 2): 4, (1, 2): 3, (0, 3): 5, (1, 3): 4, (2, 3): 3, (0, 4): 6,
           (1, 4): 5, (2, 4): 4, (3, 4): 3}

TOPOLOGIES = {
    # name: (datacenter types, datacenters whose roles run apart)
    "three-full": (["full", "full", "full"], []),
    "witness": (["full", "full", "witness"], []),
    "split-roles": (["full", "full", "full"], ["C"]),
    "five-full": (["full", "full", "full", "full", "full"], []),
    "cell": (["full", "full", "full"], []),
}
# Topologies with a datacenter whose Bigtable is a cell: that datacenter.
CELL = {"cell": "A"}
CELL_MASTERS = 2
CELL_TABLETS = 2
# The status a cell's master or tablet server exits with when it lost its
# lock-service session (it stops at once so that another takes over; a
# supervisor starts it again).
LOST_LEASE = 3


class ClusterError(Exception):
    pass


def free_port(rng, taken):
    """A port free on 127.0.0.1 now, below the ephemeral range, not yet
    given to this cluster."""
    for _ in range(1000):
        port = rng.randint(10000, 32000)
        if port in taken:
            continue
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            s.close()
        taken.add(port)
        return port
    raise ClusterError("no free port on 127.0.0.1 after 1,000 tries")


class Process:
    """One megastored process: started, killed, paused and restarted by
    name ("A", "C/coordinator", "B/gateway"). An exit the runner did not
    cause (anything but its own SIGKILL or SIGTERM) is recorded in
    `crashes`, with the exit status, before the process is started again;
    a crash leaves its core file in the run's `cores/NAME/`."""

    def __init__(self, name, argv, log_path, env=None, core_dir=None,
                 ready="megastored: ready", may_lose_lease=False):
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.env = env
        self.core_dir = core_dir
        self.ready_text = ready.encode()
        # A cell's master or tablet server: exiting LOST_LEASE on its own is
        # how it hands over, not a crash; it is started again.
        self.may_lose_lease = may_lose_lease
        self.lost_lease = False
        self.lease_exits = 0
        self.lock = threading.RLock()  # start/kill/pause from the injector and supervisor
        self.popen = None
        self.paused = False
        self.expect_exit = False
        self.starts = 0
        self.crashes = []  # exit statuses of exits nobody asked for

    def check_exit(self):
        """Records an exit the runner did not cause (once)."""
        with self.lock:
            if (self.popen is not None and self.popen.poll() is not None and
                    not self.expect_exit):
                if self.may_lose_lease and self.popen.returncode == LOST_LEASE:
                    self.lost_lease = True
                    self.lease_exits += 1
                else:
                    self.crashes.append(self.popen.returncode)
                self.expect_exit = True  # recorded

    def start(self, wait_ready=True, timeout=60):
        with self.lock:
            if not (self.may_lose_lease and wait_ready):
                return self._start(wait_ready, timeout)
            # A cell's server started again within its old session's lease
            # cannot rejoin until that session expires (it exits 1 saying
            # so): tried again, as a supervisor would, within `timeout`.
            deadline = time.monotonic() + timeout
            while True:
                try:
                    return self._start(True, max(1.0, deadline - time.monotonic()))
                except ClusterError as e:
                    if "before it was ready" not in str(e) or time.monotonic() > deadline:
                        raise
                    time.sleep(1.0)

    def _start(self, wait_ready, timeout):
        self.check_exit()
        self.lost_lease = False
        self.starts += 1
        log = open(self.log_path, "ab")
        log.write(f"=== start {self.starts}: {' '.join(self.argv)}\n".encode())
        log.flush()
        cwd = None
        if self.core_dir:
            os.makedirs(self.core_dir, exist_ok=True)
            cwd = self.core_dir  # core_pattern "core" writes into the working directory

        def limits():
            resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY,
                                                      resource.RLIM_INFINITY))

        self.popen = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=log,
                                      stdin=subprocess.DEVNULL, env=self.env, cwd=cwd,
                                      start_new_session=True, preexec_fn=limits)
        log.close()
        self.paused = False
        self.expect_exit = False
        if wait_ready:
            self.wait_ready(timeout)

    def wait_ready(self, timeout):
        """Waits (at most `timeout` s) for "megastored: ready" on the
        process's stdout; a thread copies its stdout into the log."""
        lines = queue.Queue()
        ready = threading.Event()

        def drain(stream, path):
            with open(path, "ab") as log:
                for line in iter(stream.readline, b""):
                    log.write(line)
                    log.flush()
                    if self.ready_text in line:
                        ready.set()
            stream.close()
            lines.put(None)  # end of output

        threading.Thread(target=drain, args=(self.popen.stdout, self.log_path),
                         daemon=True).start()
        deadline = time.monotonic() + timeout
        while not ready.is_set():
            try:
                lines.get(timeout=0.1)
                if ready.is_set():
                    break
                code = self.popen.wait()
                self.expect_exit = True  # reported here, not as a crash
                raise ClusterError(f"{self.name} exited with status {code} before it was "
                                   f"ready (log: {self.log_path})")
            except queue.Empty:
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise ClusterError(f"{self.name} not ready after {timeout} s "
                                   f"(log: {self.log_path})")

    def alive(self):
        return self.popen is not None and self.popen.poll() is None

    def kill(self):
        with self.lock:
            self.check_exit()
            if self.alive():
                self.expect_exit = True
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()
            self.paused = False
            self.lost_lease = False  # the runner's kill: its heal restarts it

    def pause(self):
        with self.lock:
            if self.alive():
                os.killpg(self.popen.pid, signal.SIGSTOP)
                self.paused = True

    def resume(self):
        with self.lock:
            if self.alive() and self.paused:
                os.killpg(self.popen.pid, signal.SIGCONT)
            self.paused = False

    def restart_if_lost_lease(self, timeout=60):
        """Starts it again if it exited LOST_LEASE on its own (a
        supervisor's job); True if it did."""
        with self.lock:
            self.check_exit()
            if not self.lost_lease or self.alive():
                return False
            self.start(True, timeout)
            return True

    def stop(self, timeout=20):
        """SIGTERM (a clean shutdown), then SIGKILL if it lingers. Returns
        None if it was not running (a crash is in `crashes`), else its exit
        status, or "no exit in N s"."""
        with self.lock:
            self.check_exit()
            if not self.alive():
                return None
            self.resume()
            self.expect_exit = True
            self.popen.terminate()
            try:
                return self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                return f"no exit {timeout} s after SIGTERM"


FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"
DISK_MB = 512  # the tmpfs holding the data of a datacenter whose disk fills


def slowio_lib(bindir):
    """The slow-disk preload library (tools/campaign/slowio.c), built
    beside megastored."""
    return os.path.join(bindir, "libmsslowio.so")


class Cluster:
    """A cluster of `topology` in `workdir`, from the binaries in `bindir`.

    `network`: a network.Network (each datacenter in its namespace) or
    None (every process on 127.0.0.1). `faketime`: run every process under
    libfaketime, its offset in workdir/clock/NAME.rc (clock faults).
    `disk_dc`: a datacenter whose data lives on a tmpfs of DISK_MB (disk-full
    faults). `tls`: mutual TLS between every process and on the gateways,
    with certificates of a CA made for the run (`msadmin certs`). `slowio`:
    every storage process preloads libmsslowio, its delay per I/O call in
    workdir/slowio/NAME.us (slow-disk faults)."""

    def __init__(self, topology, workdir, bindir, rng, schema_pb, network=None, faketime=False,
                 disk_dc=None, tls=False, slowio=False):
        if topology not in TOPOLOGIES:
            raise ClusterError(f"no topology {topology!r} (one of {', '.join(TOPOLOGIES)})")
        self.topology = topology
        self.workdir = workdir
        self.bindir = bindir
        self.schema = schema_pb
        types, split = TOPOLOGIES[topology]
        self.names = [chr(ord("A") + i) for i in range(len(types))]
        self.types = dict(zip(self.names, types))
        self.split = split
        self.network = network
        self.faketime = faketime
        self.slowio = slowio
        self.disk_dc = disk_dc
        self.mounted = []
        taken = set()
        self.address = {n: free_port(rng, taken) for n in self.names}
        self.role_ports = {n: {"coordinator": free_port(rng, taken),
                               "replication": free_port(rng, taken)} for n in split}
        self.gateway_port = {n: free_port(rng, taken) for n in self.names}
        self.cell_dc = CELL.get(topology)
        if self.cell_dc:
            self.cell_ports = {"lock": free_port(rng, taken),
                               "masters": [free_port(rng, taken) for _ in range(CELL_MASTERS)],
                               "tablets": [free_port(rng, taken) for _ in range(CELL_TABLETS)]}
        self.supervisor = None
        self.supervising = threading.Event()
        self.supervisor_problems = []
        self.config_path = os.path.join(workdir, "cluster.textproto")
        self.secret_path = os.path.join(workdir, "gateway.secret")
        self.processes = {}  # name -> Process
        self.tls = self._make_certs() if tls else None
        self._write_config()
        self._define_processes()

    def host(self, dc):
        """The address `dc`'s processes listen on."""
        return self.network.ip(dc) if self.network else "127.0.0.1"

    def _make_certs(self):
        """A CA for the run, a certificate per datacenter (for its address)
        and one for clients (the workloads and msadmin): their paths."""
        msadmin = os.path.join(self.bindir, "msadmin")
        d = os.path.join(self.workdir, "tls")
        ca = os.path.join(d, "ca")

        def run(*argv):
            r = subprocess.run([msadmin, "certs", *argv], capture_output=True, text=True)
            if r.returncode != 0:
                raise ClusterError(f"msadmin certs {argv[0]}: {(r.stdout + r.stderr).strip()}")

        run("init", f"--dir={ca}")
        for n in self.names:
            run("issue", f"--dir={ca}", f"dc-{n}", f"--host={self.host(n)}", f"--out={d}")
        run("issue", f"--dir={ca}", "campaign-client", f"--out={d}")
        return {"ca": os.path.join(ca, "ca.crt"),
                "cert": os.path.join(d, "campaign-client.crt"),
                "key": os.path.join(d, "campaign-client.key"),
                "dc": {n: (os.path.join(d, f"dc-{n}.crt"), os.path.join(d, f"dc-{n}.key"))
                       for n in self.names}}

    def _write_config(self):
        lines = ["# Written by the campaign runner."]
        if self.tls:
            lines.append(f'tls {{ ca: "{self.tls["ca"]}" }}')
            lines.append(f'client_tls {{ cert: "{self.tls["cert"]}" key: "{self.tls["key"]}" }}')
        for n in self.names:
            h = self.host(n)
            lines.append(f'datacenters {{ name: "{n}" type: "{self.types[n]}" '
                         f'address: "{h}:{self.address[n]}"')
            if self.tls:
                cert, key = self.tls["dc"][n]
                lines.append(f'  tls {{ cert: "{cert}" key: "{key}" }}')
            if n == self.cell_dc:
                lines.append(f'  bigtable_cell {{ name: "{n.lower()}" '
                             f'lock_service: "{h}:{self.cell_ports["lock"]}" }}')
            if n in self.split:
                r = self.role_ports[n]
                lines.append(f'  roles {{ coordinator: "{h}:{r["coordinator"]}" '
                             f'replication: "{h}:{r["replication"]}" }}')
            lines.append("}")
        for i, a in enumerate(self.names):
            for j, b in enumerate(self.names):
                if i < j:
                    lines.append(f'links {{ a: "{a}" b: "{b}" one_way_ms: {LINK_MS[(i, j)]} }}')
        with open(self.config_path, "w") as f:
            f.write("\n".join(lines) + "\n")
        with open(self.secret_path, "wb") as f:
            f.write(os.urandom(32).hex().encode())

    def _define_processes(self):
        megastored = os.path.join(self.bindir, "megastored")
        logs = os.path.join(self.workdir, "logs")
        os.makedirs(logs, exist_ok=True)

        def base(dc):
            return [megastored, f"--config={self.config_path}", f"--datacenter={dc}",
                    "--no-sync", "--log-level=warn"]

        for n in self.names:
            data = os.path.join(self.workdir, "data", n)
            storage = ["--data=" + data, "--schema=" + self.schema]
            if n == self.cell_dc:
                self._define_cell(n, megastored, logs)
                # Its own process holds no tablets: the lock role's state only.
                storage = ["--data=" + os.path.join(data, "dc"), "--schema=" + self.schema]
            if n in self.split:
                self._add(f"{n}/tablet,lock", base(n) + storage + ["--roles=tablet,lock"], logs)
                self._add(f"{n}/coordinator", base(n) + ["--roles=coordinator"], logs)
                self._add(f"{n}/replication", base(n) + ["--roles=replication"], logs)
            else:
                self._add(n, base(n) + storage, logs)
            self._add(f"{n}/gateway", base(n) + [
                "--roles=gateway", "--schema=" + self.schema,
                f"--gateway={self.host(n)}:{self.gateway_port[n]}",
                "--gateway-secret-file=" + self.secret_path], logs)

    def _define_cell(self, n, megastored, logs):
        """Datacenter `n`'s Bigtable as a cell (docs/cell.md): its lock
        service, masters (one active, the others standing by) and tablet
        servers, sharing one data root."""
        h = self.host(n)
        root = os.path.join(self.workdir, "data", n, "cell")
        lock = f"{h}:{self.cell_ports['lock']}"
        common = ["--log-level=warn"]
        if self.tls:
            cert, key = self.tls["dc"][n]
            common += [f"--tls-ca={self.tls['ca']}", f"--tls-cert={cert}", f"--tls-key={key}"]
        cell = [f"--cell={n.lower()}", f"--lock-service={lock}", f"--data={root}"]
        self._add(f"{n}/cell-lock", [megastored, "--roles=lock", f"--listen={lock}",
                                     "--data=" + os.path.join(self.workdir, "data", n, "cell-lock")]
                  + common, logs, ready="lock service listening")
        for i, port in enumerate(self.cell_ports["masters"], 1):
            self._add(f"{n}/master{i}", [megastored, "--roles=master", f"--listen={h}:{port}"] +
                      cell + common, logs, ready="campaigning", may_lose_lease=True)
        for i, port in enumerate(self.cell_ports["tablets"], 1):
            self._add(f"{n}/tablet{i}", [megastored, f"--listen={h}:{port}", "--no-sync"] +
                      cell + common, logs, ready="registered in cell", may_lose_lease=True)

    def _add(self, name, argv, logs, ready="megastored: ready", may_lose_lease=False):
        file_name = name.replace("/", "-").replace(",", "+")
        path = os.path.join(logs, file_name + ".log")
        dc = name.split("/")[0]
        if self.network:
            argv = self.network.exec_prefix(dc) + argv
        env = None
        preload = []
        if self.faketime:
            clock_dir = os.path.join(self.workdir, "clock")
            os.makedirs(clock_dir, exist_ok=True)
            rc = os.path.join(clock_dir, file_name + ".rc")
            with open(rc, "w") as f:
                f.write("+0\n")
            preload.append(FAKETIME_LIB)
            env = dict(os.environ, FAKETIME_TIMESTAMP_FILE=rc,
                       FAKETIME_CACHE_DURATION="1", FAKETIME_DONT_FAKE_MONOTONIC="1",
                       DONT_FAKE_MONOTONIC="1")  # the older libfaketime's name
        if self.slowio and not name.endswith("/gateway"):
            path = self.slowio_file(name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write("0\n")
            preload.append(slowio_lib(self.bindir))
            env = dict(env or os.environ, MS_SLOWIO_FILE=path)
        if preload:
            env["LD_PRELOAD"] = " ".join(preload)
        self.processes[name] = Process(name, argv, path, env,
                                       core_dir=os.path.join(self.workdir, "cores", file_name),
                                       ready=ready, may_lose_lease=may_lose_lease)

    def slowio_file(self, name):
        return os.path.join(self.workdir, "slowio",
                            name.replace("/", "-").replace(",", "+") + ".us")

    def clock_file(self, name):
        return os.path.join(self.workdir, "clock",
                            name.replace("/", "-").replace(",", "+") + ".rc")

    def mount_disk(self):
        """The disk-full datacenter's data directory on a tmpfs of its own."""
        if not self.disk_dc:
            return
        path = os.path.join(self.workdir, "data", self.disk_dc)
        os.makedirs(path, exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", path],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise ClusterError(f"mount tmpfs on {path}: {r.stderr.strip()}")
        self.mounted.append(path)

    def unmount_disk(self):
        for path in self.mounted:
            subprocess.run(["umount", "-l", path], capture_output=True)
        self.mounted = []

    def ballast_path(self):
        return os.path.join(self.workdir, "data", self.disk_dc, "ballast")

    def storage_processes(self, dc):
        """The processes holding `dc`'s roles (not its gateway)."""
        return [p for name, p in self.processes.items()
                if name.split("/")[0] == dc and not name.endswith("/gateway")]

    def start(self, timeout=90):
        self.mount_disk()
        for name, p in self.processes.items():
            if not name.endswith("/gateway"):
                p.start()
        for name, p in self.processes.items():
            if name.endswith("/gateway"):
                p.start()
        if any(p.may_lose_lease for p in self.processes.values()):
            self.supervisor = threading.Thread(target=self._supervise, daemon=True)
            self.supervisor.start()
        self.wait_healthy(timeout)

    def _supervise(self, give_up_s=90):
        """Starts again a cell process that exited because it lost its
        lock-service session (as a supervisor like systemd would); one that
        cannot start (its lock service is down too) is tried again, for at
        most `give_up_s` seconds."""
        failing = {}  # name -> when its restarts began failing
        while not self.supervising.wait(0.2):
            for name, p in self.processes.items():
                if not p.may_lose_lease:
                    continue
                try:
                    if p.restart_if_lost_lease():
                        failing.pop(name, None)
                except ClusterError as e:
                    p.lost_lease = True  # try again
                    since = failing.setdefault(name, time.monotonic())
                    if time.monotonic() - since > give_up_s:
                        self.supervisor_problems.append(
                            f"{name} lost its lease and could not start again in {give_up_s} s: "
                            f"{e}")
                        p.lost_lease = False
                        failing.pop(name)

    def stop_supervising(self):
        self.supervising.set()
        if self.supervisor is not None:
            self.supervisor.join(120)

    def lease_exits(self):
        return sum(p.lease_exits for p in self.processes.values())

    def wait_healthy(self, timeout):
        """Until `msadmin cluster status` says every datacenter is up and
        every coordinator serving."""
        msadmin = os.path.join(self.bindir, "msadmin")
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            r = subprocess.run([msadmin, "cluster", "status", f"--config={self.config_path}",
                                "--timeout=2"], capture_output=True, text=True)
            if r.returncode == 0:
                return
            last = r.stdout + r.stderr
            time.sleep(0.3)
        raise ClusterError(f"the cluster is not healthy after {timeout} s: {last.strip()}")

    def gateways(self):
        """(datacenter, host, port) of each gateway."""
        return [(n, self.host(n), self.gateway_port[n]) for n in self.names]

    def stop(self):
        """Stops every process (clean shutdown first). Returns what went
        wrong: a process that did not exit 0 on SIGTERM."""
        self.stop_supervising()
        bad = list(self.supervisor_problems)
        for name, p in reversed(list(self.processes.items())):
            code = p.stop()
            if code not in (0, None):
                bad.append(f"{name} exited {code} on SIGTERM" if isinstance(code, int) else
                           f"{name}: {code}")
        return bad

    def crashes(self):
        """Every exit the runner did not cause, as problems."""
        out = []
        for name, p in self.processes.items():
            p.check_exit()
            for code in p.crashes:
                out.append(f"{name} died on its own (exit status {code}; log {p.log_path})")
        return out

    def kill_all(self):
        self.stop_supervising()
        for p in self.processes.values():
            p.kill()

    def save_disk(self):
        """Copies the tmpfs's data beside it (data/DC.saved) before it is
        unmounted, for a run whose data is kept."""
        for path in self.mounted:
            shutil.copytree(path, path + ".saved", dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("ballast"))


def compile_schema(bindir, workdir):
    here = os.path.dirname(os.path.abspath(__file__))
    out = os.path.join(workdir, "schema")
    r = subprocess.run([os.path.join(bindir, "msc"), os.path.join(here, "campaign.msdl"),
                        f"--out={out}"], capture_output=True, text=True)
    if r.returncode != 0:
        raise ClusterError(f"msc failed: {r.stdout}{r.stderr}")
    return os.path.join(out, "Campaign.schema.pb")

