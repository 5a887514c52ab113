"""Network partitions between datacenters, with Linux network namespaces.

Each datacenter's processes run in a namespace of their own
(`ip netns exec`), reaching the others over a veth pair on a bridge in the
host's namespace, which also holds the address the runner's clients use.
A partition is an nftables rule in the receiving namespace's input chain
dropping packets from the other datacenter's address — silently, as a
real partition does (TCP retransmits until its timeouts), and one-way when
only one side drops. A flaky link drops a share of the packets at random.
Needs root (CAP_NET_ADMIN), iproute2 and nftables (`./ms deps`).
"""

import os
import shutil
import subprocess
import time

RUN_DIR = "/run/megastore-campaign"


class NetworkError(Exception):
    pass


def available():
    """(True, "") if namespaces and nftables can be used here, else
    (False, why)."""
    if os.geteuid() != 0:
        return False, "not root (network namespaces need CAP_NET_ADMIN)"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return False, f"no {tool} (./ms deps installs iproute2 and nftables)"
    return True, ""


def _run(*argv, check=True):
    r = subprocess.run(list(argv), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise NetworkError(f"{' '.join(argv)}: {r.stderr.strip() or r.stdout.strip()}")
    return r


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale():
    """Removes namespaces and bridges left by campaigns whose runner died
    (each records its pid in RUN_DIR/TAG.pid)."""
    if not os.path.isdir(RUN_DIR):
        return
    for name in os.listdir(RUN_DIR):
        if not name.endswith(".pid"):
            continue
        path = os.path.join(RUN_DIR, name)
        try:
            with open(path) as f:
                pid = int(f.read().strip() or 0)
        except (OSError, ValueError):
            pid = 0
        if pid and _alive(pid):
            continue
        Network(name[:-4], []).teardown()


class Network:
    """Namespaces for datacenters `names` under a short unique `tag`."""

    def __init__(self, tag, names):
        self.tag = tag
        self.names = list(names)
        self.subnet = f"10.{200 + int(tag) % 50}.{int(tag) // 50 % 250}"
        self.bridge = f"msb{tag}"

    def ns(self, dc):
        return f"ms{self.tag}{dc}"

    def ip(self, dc):
        return f"{self.subnet}.{self.names.index(dc) + 1}"

    def host_ip(self):
        return f"{self.subnet}.254"

    def setup(self):
        """Creates the bridge and the namespaces; on any failure removes what
        it made."""
        self.teardown()  # leftovers of an earlier run under this tag
        os.makedirs(RUN_DIR, exist_ok=True)
        with open(os.path.join(RUN_DIR, f"{self.tag}.pid"), "w") as f:
            f.write(str(os.getpid()))
        try:
            self._setup()
        except BaseException:
            self.teardown()
            raise

    def _setup(self):
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.host_ip()}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for dc in self.names:
            ns, host_end, ns_end = self.ns(dc), f"ms{self.tag}{dc}h", f"ms{self.tag}{dc}n"
            _run("ip", "netns", "add", ns)
            _run("ip", "link", "add", host_end, "type", "veth", "peer", "name", ns_end)
            _run("ip", "link", "set", host_end, "master", self.bridge)
            _run("ip", "link", "set", host_end, "up")
            _run("ip", "link", "set", ns_end, "netns", ns)
            _run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.ip(dc)}/24", "dev",
                 ns_end)
            _run("ip", "netns", "exec", ns, "ip", "link", "set", ns_end, "up")
            _run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            _run("ip", "netns", "exec", ns, "nft", "add", "table", "inet", "campaign")
            _run("ip", "netns", "exec", ns, "nft", "add", "chain", "inet", "campaign", "input",
                 "{ type filter hook input priority 0; }")

    def teardown(self):
        """Removes the namespaces, the veth pairs and the bridge. A namespace
        goes away only when its last process has, so the host ends of the
        veth pairs are deleted here too (which deletes both ends), and the
        teardown waits until they are gone."""
        names = self.names or list("ABCDE")
        for dc in names:
            _run("ip", "netns", "del", self.ns(dc), check=False)
            _run("ip", "link", "del", f"ms{self.tag}{dc}h", check=False)
        _run("ip", "link", "del", self.bridge, check=False)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            links = _run("ip", "-o", "link", "show", check=False).stdout
            if not any(f"ms{self.tag}{dc}" in links for dc in names) and \
                    self.bridge not in links:
                break
            time.sleep(0.1)
        try:
            os.unlink(os.path.join(RUN_DIR, f"{self.tag}.pid"))
        except OSError:
            pass

    def exec_prefix(self, dc):
        return ["ip", "netns", "exec", self.ns(dc)]

    def drop(self, to_dc, from_dc, percent=100):
        """`to_dc` drops what `from_dc` sends it (all, or `percent`% at random)."""
        rule = ["ip", "saddr", self.ip(from_dc)]
        if percent < 100:
            rule += ["numgen", "random", "mod", "100", "<", str(percent)]
        _run("ip", "netns", "exec", self.ns(to_dc), "nft", "add", "rule", "inet", "campaign",
             "input", *rule, "drop")

    def heal(self):
        for dc in self.names:
            _run("ip", "netns", "exec", self.ns(dc), "nft", "flush", "chain", "inet",
                 "campaign", "input")


def new_tag():
    """A tag no namespace on this host uses yet."""
    existing = (_run("ip", "netns", "list", check=False).stdout +
                _run("ip", "-o", "link", "show", check=False).stdout)
    for n in range(os.getpid() % 9000, os.getpid() % 9000 + 9000):
        tag = str(1000 + n % 9000)
        if f"ms{tag}" not in existing and f"msb{tag}" not in existing:
            return tag
    raise NetworkError("no free namespace tag")
