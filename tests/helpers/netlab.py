"""A small network of Linux namespaces for the partition tests, and the cuts made in it.

Each *role* (``db``, ``mcp``, ``op``, ``w1`` …) is a network namespace with one
interface on a bridge that lives in a namespace of its own, so nothing is
added to the machine's own network. A *cut* between two roles drops every
packet each end receives from the other (iptables in each namespace's INPUT
chain): nothing is refused, reset or answered with ICMP, and a packet sent
into the cut is simply never seen, as across a failed switch. The drop is on
arrival rather than on sending because a packet dropped in OUTPUT fails the
sender's system call at once (EPERM), which no real network does.

The servers (``LabPostgres``, ``LabRedis``) are the test's own, started from
the machine's binaries in the ``db`` namespace and listening on its bridge
address; they also listen on Unix sockets in a folder of the file system,
which no cut touches: the test process, in the machine's own namespace, reads
and checks state through them while the workers' TCP connections are cut.

Needs root, ``ip`` (iproute2), ``iptables``, and the PostgreSQL and Redis
server binaries; ``prerequisites`` says what is missing.
"""

import contextlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

SUBNET = "10.213.0"  # each lab has its own bridge: labs never see each other's addresses
NAME = re.compile(r"^so(\d+)x\d+-")  # a lab's namespaces: so<pid>x<n>-<role>
DIRECTORY = re.compile(r"^signoff-lab-(\d+)-")
PG_BIN = Path("/usr/lib/postgresql/15/bin")
REDIS_SERVER = "/usr/bin/redis-server"


def prerequisites():
    """What this machine lacks for a lab (empty when nothing is missing)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (network namespaces and iptables)")
    for tool in ("ip", "iptables", "ss", "setpriv"):
        if shutil.which(tool) is None:
            missing.append(f"{tool} (apt-get install -y iptables iproute2; .ci/run does)")
    for binary in (PG_BIN / "initdb", PG_BIN / "postgres", Path(REDIS_SERVER)):
        if not binary.exists():
            missing.append(str(binary))
    return missing


def _sh(*argv):
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


def sweep_leftovers():
    """Stop the processes and delete the namespaces and files of labs whose test process
    no longer runs (a killed run: its servers would live on in their namespaces)."""
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    for line in listing.stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        found = NAME.match(name)
        if found and not os.path.exists(f"/proc/{found.group(1)}"):
            pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True)
            for pid in pids.stdout.split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
    for folder in Path(tempfile.gettempdir()).glob("signoff-lab-*"):
        found = DIRECTORY.match(folder.name)
        if found and not os.path.exists(f"/proc/{found.group(1)}"):
            shutil.rmtree(folder, ignore_errors=True)


def _folder(kind):
    """A new folder for a lab server's files, named by this process (see ``sweep_leftovers``)."""
    return Path(tempfile.mkdtemp(prefix=f"signoff-lab-{os.getpid()}-{kind}-"))


class Lab:
    """Namespaces on one bridge: ``roles`` maps each role to the last octet of its address."""

    _made = 0

    def __init__(self, roles):
        Lab._made += 1
        self.prefix = f"so{os.getpid()}x{Lab._made}-"
        self.roles = dict(roles)
        self.bridge = self.prefix + "br"
        self.cuts = set()
        self.procs = []
        self._made_names = []

    def namespace(self, role):
        """The namespace of ``role``."""
        return self.prefix + role

    def address(self, role):
        """The bridge address of ``role``."""
        return f"{SUBNET}.{self.roles[role]}"

    def up(self):
        """Make the bridge and every role's namespace on it."""
        sweep_leftovers()
        for name in [self.bridge] + [self.namespace(r) for r in self.roles]:
            _sh("ip", "netns", "add", name)
            self._made_names.append(name)
            _sh("ip", "-n", name, "link", "set", "lo", "up")
        _sh("ip", "-n", self.bridge, "link", "add", "br0", "type", "bridge")
        _sh("ip", "-n", self.bridge, "link", "set", "br0", "up")
        for role in self.roles:
            ns = self.namespace(role)
            _sh("ip", "-n", self.bridge, "link", "add", role, "type", "veth",
                "peer", "name", "eth0", "netns", ns)
            _sh("ip", "-n", self.bridge, "link", "set", role, "master", "br0")
            _sh("ip", "-n", self.bridge, "link", "set", role, "up")
            _sh("ip", "-n", ns, "addr", "add", f"{self.address(role)}/24", "dev", "eth0")
            _sh("ip", "-n", ns, "link", "set", "eth0", "up")
        return self

    def argv(self, role, argv):
        """``argv`` run inside ``role``'s namespace."""
        return ["ip", "netns", "exec", self.namespace(role), *map(str, argv)]

    def spawn(self, role, argv, log=None, **popen):
        """Start ``argv`` in ``role``'s namespace (its standard error to the file ``log``,
        if given); stopped by ``close`` if still running."""
        if log is not None:
            with open(log, "ab") as err:
                return self.spawn(role, argv, stderr=err, stdout=subprocess.DEVNULL, **popen)
        proc = subprocess.Popen(self.argv(role, argv), **popen)
        self.procs.append(proc)
        return proc

    def cut(self, a, b):
        """Drop every packet between ``a`` and ``b``, at both ends, silently."""
        for here, there in ((a, b), (b, a)):
            _sh("ip", "netns", "exec", self.namespace(here), "iptables", "-I", "INPUT",
                "-s", self.address(there), "-j", "DROP")
        self.cuts.add((a, b))

    def forget(self, role, peer):
        """Make ``role``'s kernel forget its TCP connections with ``peer`` (``ss -K``), as a
        server that restarted or failed over has: its processes see the sessions end,
        while the reset it sends is lost in a cut. Returns how many were forgotten."""
        ss = ["ip", "netns", "exec", self.namespace(role), "ss", "-tnH"]
        listed = subprocess.run(ss + ["dst", self.address(peer)], capture_output=True,
                                text=True, check=True, timeout=30)
        subprocess.run(ss + ["-K", "dst", self.address(peer)], capture_output=True, timeout=30)
        return len(listed.stdout.splitlines())

    def heal(self):
        """Lift every cut."""
        for a, b in sorted(self.cuts):
            for here, there in ((a, b), (b, a)):
                _sh("ip", "netns", "exec", self.namespace(here), "iptables", "-D", "INPUT",
                    "-s", self.address(there), "-j", "DROP")
        self.cuts.clear()

    def close(self):
        """Stop what was started here and delete the namespaces."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.communicate(timeout=10)  # its pipes closed too
        for name in reversed(self._made_names):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def wait_until(predicate, timeout, what):
    """Poll ``predicate`` until truthy; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class LabPostgres:
    """A PostgreSQL server of the test's own in ``role``'s namespace (as user postgres)."""

    def __init__(self, lab, role="db", port=5432):
        self.lab, self.role, self.port = lab, role, port
        self.dir = _folder("pg")
        account = pwd.getpwnam("postgres")
        os.chown(self.dir, account.pw_uid, account.pw_gid)
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"

    def start(self):
        """initdb and start the server; returns self once it answers."""
        subprocess.run(["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups",
                        PG_BIN / "initdb", "-D", self.data,
                        "-A", "trust", "-U", "postgres", "-N", "--no-instructions"],
                       check=True, capture_output=True, timeout=120)
        with open(self.data / "pg_hba.conf", "a", encoding="utf-8") as hba:
            hba.write(f"host all all {SUBNET}.0/24 trust\n")
        settings = {"listen_addresses": self.lab.address(self.role), "port": self.port,
                    "unix_socket_directories": self.dir, "fsync": "off",
                    "synchronous_commit": "off", "full_page_writes": "off",
                    "max_connections": 200, "shared_buffers": "32MB",
                    "log_min_messages": "warning"}
        options = [f"-c{name}={value}" for name, value in settings.items()]
        # setpriv, unlike runuser, execs the server in its own process: the pid the lab
        # holds is the postmaster's, and a signal to it ends the server.
        self.proc = self.lab.spawn(self.role, ["setpriv", "--reuid=postgres", "--regid=postgres",
                                               "--init-groups", PG_BIN / "postgres", "-D",
                                               self.data, *options], log=self.log)
        wait_until(self._answers, 60, "the lab's PostgreSQL to start")
        return self

    def _answers(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"the lab's PostgreSQL exited: {self.log.read_text()[-2000:]}")
        import psycopg
        try:
            psycopg.connect(self.local_url("postgres"), connect_timeout=2).close()
            return True
        except psycopg.OperationalError:
            return False

    def url(self, database):
        """``database`` over TCP at the bridge address (what the workers use)."""
        return f"postgresql://postgres@{self.lab.address(self.role)}:{self.port}/{database}"

    def local_url(self, database):
        """``database`` over the Unix socket (what the test uses: no cut reaches it)."""
        return f"postgresql://postgres@/{database}?host={self.dir}&port={self.port}"

    def create_database(self, name):
        """Create database ``name``; its Unix-socket URL."""
        import psycopg
        with psycopg.connect(self.local_url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.local_url(name)

    def close(self):
        """Stop the server (immediate shutdown: its sessions end with it), remove its files."""
        _stop(getattr(self, "proc", None), signal.SIGQUIT)
        shutil.rmtree(self.dir, ignore_errors=True)


def _stop(proc, signum):
    if proc is not None and proc.poll() is None:
        proc.send_signal(signum)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


class LabRedis:
    """A redis-server of the test's own in ``role``'s namespace, without persistence."""

    def __init__(self, lab, role="db", port=6379):
        self.lab, self.role, self.port = lab, role, port
        self.dir = _folder("redis")
        self.socket = self.dir / "redis.sock"

    def start(self):
        """Start the server; returns self once it answers."""
        self.proc = self.lab.spawn(self.role, [
            REDIS_SERVER, "--bind", self.lab.address(self.role), "--port", self.port,
            "--unixsocket", self.socket, "--unixsocketperm", "700", "--save", "",
            "--appendonly", "no", "--protected-mode", "no", "--dir", self.dir],
            log=self.dir / "server.log")
        wait_until(self.socket.exists, 30, "the lab's Redis to start")
        return self

    def url(self):
        """Over TCP at the bridge address (what the workers use)."""
        return f"redis://{self.lab.address(self.role)}:{self.port}/0"

    def local_url(self):
        """Over the Unix socket (what the test uses)."""
        return f"unix://{self.socket}?db=0"

    def close(self):
        """Stop the server, remove its files."""
        _stop(getattr(self, "proc", None), signal.SIGTERM)
        shutil.rmtree(self.dir, ignore_errors=True)
