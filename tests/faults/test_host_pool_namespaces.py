"""One pool per host across network, pid and mount namespaces: whole processes on a simulated host.

Before, this host's pool held identities with abstract UNIX sockets alone,
which Linux keeps per network namespace: a process under ``unshare --net``,
``ip netns exec``, systemd's ``PrivateNetwork=yes`` or in a container that
mounted the host's pool directory was a pool of its own, and took the IDs the
host's processes held (``idmint generate --generator 1980`` in two namespaces:
213,984 and 202,016 of 600,000 IDs twice; two processes started at one
instant on ``generators=0-7``, one per namespace, the same ID in 3 of 25
trials). Marks hidden in another view of ``/var/lib`` let a successor whose
clock stepped back repeat a killed holder's IDs (97,672 duplicates), and the
container entrypoint took any mount point for the host's directory (two
containers on their own ``/dev/shm``: 190,558 duplicates).

Now a claim holds its key also with lock files in ``/var/lib/idmint`` and
``/dev/shm``, a ``/dev/shm`` copy of each mark says which ``/var/lib/idmint``
its holder used, and the entrypoint accepts a pool directory only with a
marker the host's idmint processes left there this boot. Each test boots a
host of its own (tests/faults/simulated_host.py). Runs as root.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from tests.faults.simulated_host import BARE_PATH, DEPLOY, Outcome, Run, SimulatedHost, as_unit
from tests.faults.wallclock import build_shim

from idmint import Uid64
from idmint.coordinate.hostpool import host_marker

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces and setpriv")

CONTAINER_USER = 10001
"""The container image's user (deploy/Containerfile)."""
NOBODY = 65534
RACE_TRIALS = 64


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("namespaces-shim")
    directory.chmod(0o755)
    return build_shim(directory)


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    """A directory of the test that the simulated host's processes reach and write."""
    directory = tmp_path / "shared"
    directory.mkdir()
    directory.chmod(0o777)
    return directory


@pytest.fixture
def host(tmp_path: Path, shim: Path, shared: Path) -> SimulatedHost:
    return SimulatedHost(tmp_path / "host", shim=shim, keep=(shared,))


def _generate(count: int, *options: str) -> list[str]:
    return ["generate", "--count", str(count), *options]


def _duplicates(*groups: list[str]) -> list[str]:
    counts = Counter(value for group in groups for value in group)
    return [value for value, seen in counts.items() if seen > 1]


def _failures(outcomes: dict[str, Outcome]) -> dict[str, str]:
    return {name: o.stderr for name, o in outcomes.items() if o.returncode != 0}


def _generator_of(outcome: Outcome) -> int:
    generators = {Uid64(line).generator for line in outcome.lines}
    assert len(generators) == 1, generators
    return generators.pop()


def _one_error_line(outcome: Outcome, status: int) -> str:
    assert outcome.returncode == status, (outcome.returncode, outcome.stderr)
    assert outcome.stdout == ""
    lines = outcome.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("idmint: error: "), lines[0]
    return lines[0]


def _container(name: str, args: list[str], *, volume: bool = True, **how: object) -> Run:
    """A process as a container runs it: its own pid, network and mount namespaces
    (``/var/lib``, ``/tmp``, ``/dev/shm``), the image's user; and the host's
    ``/var/lib/idmint`` as a volume, with ``volume``."""
    return Run(
        name,
        args,
        user=CONTAINER_USER,
        pid_namespace=True,
        net_namespace=True,
        private_tmp=True,
        private_dev=True,
        private_var_lib=True,
        volumes=["/var/lib/idmint"] if volume else [],
        **how,  # type: ignore[arg-type]
    )


MAKE_POOL = ["install", "-d", "-m", "1777", "/var/lib/idmint"]
"""What the host's first root process (or deploy/idmint.service) does."""


# -- one pool whatever the network namespace ---------------------------------------------------


def test_processes_in_network_namespaces_of_their_own_share_the_pool(
    host: SimulatedHost,
) -> None:
    """The host, ``unshare --net``, ``ip netns exec``, the systemd unit with
    ``PrivateNetwork=yes``, and a container that mounts the host's /var/lib/idmint
    (all at once, ``local://``): no ID twice, one generator ID each."""
    count = 200_000
    unit = as_unit("private-network-unit", _generate(count), uid=61_234)
    unit.net_namespace = True
    runs = [
        Run("host", _generate(count), before=[MAKE_POOL]),
        Run("unshare-net", _generate(count), net_namespace=True),
        Run(
            "ip-netns",
            _generate(count),
            before=[["ip", "netns", "add", "blue"]],
            prefix=["ip", "netns", "exec", "blue"],
        ),
        unit,
        _container("container", _generate(count), env={"IDMINT_COORDINATOR": "local://"}),
    ]
    (outcomes,) = host.boot(runs)
    twice = _duplicates(*(o.lines for o in outcomes.values()))
    assert not twice, f"{len(twice)} IDs minted by two processes"
    assert not _failures(outcomes)
    assert all(len(o.lines) == count for o in outcomes.values())
    generators = [_generator_of(o) for o in outcomes.values()]
    assert len(set(generators)) == len(runs), generators
    assert not outcomes["container"].stderr, "the container keeps its marks on the host's disk"


_MINTING_HOLDER = """
import sys
from idmint import new_generator

generator = new_generator("uid64", generator=int(sys.argv[1]))
with open(sys.argv[2], "w") as out:
    print("holding", flush=True)
    while True:
        out.write("".join(f"{value}\\n" for value in generator.batch(1000)))
"""


def test_a_configured_identity_in_use_is_refused_in_another_network_namespace(
    host: SimulatedHost, shared: Path
) -> None:
    """``--generator 1980`` minting on the host: a second one is refused, in the host's
    network namespace as in one of its own."""
    minted = shared / "holder"
    holder = ["env", "-i", f"PATH={BARE_PATH}", sys.executable, "-c", _MINTING_HOLDER]
    runs = [
        Run(
            "other-namespace",
            _generate(300_000, "--generator", "1980"),
            net_namespace=True,
            beside=[[*holder, "1980", str(minted)]],
        ),
        Run("same-namespace", _generate(300_000, "--generator", "1980")),
    ]
    (outcomes,) = host.boot(runs)
    held = minted.read_text().split()
    assert held, "the holder minted nothing"
    twice = _duplicates(held, outcomes["other-namespace"].lines)
    assert not twice, f"{len(twice)} IDs of the holder minted again in another namespace"
    for outcome in outcomes.values():
        line = _one_error_line(outcome, 1)
        assert "generator 1980, cluster 0 is already in use on this host" in line, line


_API_MINTER = """
from idmint import new_generator

with new_generator("uid64") as generator:
    print("\\n".join(str(value) for value in generator.batch(120_000)))
"""


def test_the_python_api_in_two_network_namespaces_shares_the_pool(host: SimulatedHost) -> None:
    runs = [
        Run("host", [], code=_API_MINTER),
        Run("unshare-net", [], code=_API_MINTER, net_namespace=True),
    ]
    (outcomes,) = host.boot(runs)
    twice = _duplicates(*(o.lines for o in outcomes.values()))
    assert not twice, f"{len(twice)} IDs minted by both"
    assert not _failures(outcomes)
    assert _generator_of(outcomes["host"]) != _generator_of(outcomes["unshare-net"])


_RACE_CHILD = """
import json, os, sys
from idmint import new_generator

work, name, trials = sys.argv[1], sys.argv[2], int(sys.argv[3])
for trial in range(trials):
    print("waiting", flush=True)
    os.read(0, 1)  # both children read one pipe: one write releases both
    url = f"local://?generators={8 * trial}-{8 * trial + 7}"
    with new_generator("uid64", coordinator=url) as generator:
        values = generator.batch(2_000).ints()
        claimed = generator.generator
    with open(os.path.join(work, f"{name}-{trial}"), "w") as out:
        out.write("\\n".join(map(str, values)))
    print(json.dumps(claimed), flush=True)
"""

_RACE = """
import json, os, subprocess, sys, tempfile
from collections import Counter

trials = int(sys.argv[1])
work = tempfile.mkdtemp()
release, barrier = os.pipe()
children = [
    subprocess.Popen(
        [*prefix, sys.executable, "-c", sys.argv[2], work, name, str(trials)],
        stdin=release, stdout=subprocess.PIPE, text=True,
    )
    for name, prefix in (("host", []), ("unshare-net", ["unshare", "--net"]))
]
os.close(release)
same = duplicates = 0
for trial in range(trials):
    for child in children:
        assert child.stdout.readline() == "waiting\\n"
    os.write(barrier, b"xx")
    generators = [json.loads(child.stdout.readline()) for child in children]
    same += generators[0] == generators[1]
    values = Counter()
    for name in ("host", "unshare-net"):
        values.update(open(os.path.join(work, f"{name}-{trial}")).read().split())
    duplicates += sum(1 for seen in values.values() if seen > 1)
for child in children:
    assert child.wait() == 0
print(json.dumps({"trials": trials, "same_generator": same, "duplicates": duplicates}))
"""


def test_two_processes_started_at_one_instant_in_two_network_namespaces_never_share_an_id(
    host: SimulatedHost,
) -> None:
    """One process in the host's network namespace, one in its own, released together
    by one write to a pipe both wait on, claim from one range of eight; each trial a
    new range. Before: the same generator ID in 3 of 25 trials."""
    (outcomes,) = host.boot([Run("race", [str(RACE_TRIALS), _RACE_CHILD], code=_RACE)])
    race = outcomes["race"]
    assert race.returncode == 0, race.stderr
    result = json.loads(race.stdout)
    assert result == {"trials": RACE_TRIALS, "same_generator": 0, "duplicates": 0}, result


# -- marks in another view of /var/lib ----------------------------------------------------------

_KILLED_HOLDER = """
import os, signal
from idmint import new_generator

generator = new_generator("uid64", coordinator="local://?generators=5-5")
print("\\n".join(str(value) for value in generator.batch(400_000)), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_marks_in_another_view_of_var_lib_make_a_successor_refuse(host: SimulatedHost) -> None:
    """A root server in a mount namespace with its own /var/lib holds generator 5 and
    is killed; a plain one, its clock 2 s back, claims generator 5: refused, naming
    both directories (before: 97,672 IDs repeated, with no warning)."""
    hidden = Run("own-var-lib", [], code=_KILLED_HOLDER, private_var_lib=True)
    successor = Run(
        "successor",
        _generate(100_000, "--coordinator", "local://?generators=5-5"),
        clock_offset_ms=-2_000,
    )
    (killed, after) = host.boot([hidden], [successor])
    twice = _duplicates(killed["own-var-lib"].lines, after["successor"].lines)
    assert not twice, f"{len(twice)} IDs of the killed holder minted again"
    assert killed["own-var-lib"].returncode == -9
    assert len(killed["own-var-lib"].lines) == 400_000
    line = _one_error_line(after["successor"], 2)
    assert "generator 0-5 was held by" in line, line
    assert "keeps its high-water marks in /var/lib/idmint/0 (device" in line, line
    assert "this process's /var/lib/idmint/0 is on device" in line, line
    assert "/dev/shm/idmint-0/generator/0-5.mark" in line, line


# -- what cannot share the pool is refused, with what would ------------------------------------


def test_a_var_lib_idmint_this_process_cannot_write_is_refused(host: SimulatedHost) -> None:
    """/var/lib/idmint read-only here (ProtectSystem=strict without ReadWritePaths=), or
    writable by root only for a process of another user: the others hold there, so it
    cannot share their pool: refused, one line saying what would. Missing on a read-only
    /var/lib: volatile marks, and a warning whose fix can work there."""
    (missing,) = host.boot([Run("missing", _generate(3), read_only=["/var/lib"])])
    (read_only,) = host.boot(
        [Run("read-only", _generate(3), read_only=["/var/lib"], before=[MAKE_POOL])]
    )
    root_only = ["chmod", "0755", "/var/lib/idmint"]
    (closed,) = host.boot([Run("closed", _generate(3), user=NOBODY, before=[root_only])])
    warning = missing["missing"].stderr.splitlines()
    assert missing["missing"].returncode == 0, warning
    assert len(warning) == 1, warning
    assert warning[0].startswith("idmint: warning: high-water marks are kept in /dev/shm/"), warning
    assert "/var/lib is read-only here" in warning[0], warning
    assert "ReadWritePaths=/var/lib/idmint" in warning[0], warning
    line = _one_error_line(read_only["read-only"], 2)
    assert "cannot hold identities in /var/lib/idmint" in line, line
    assert "ReadWritePaths=/var/lib/idmint" in line, line
    line = _one_error_line(closed["closed"], 2)
    assert "cannot make /var/lib/idmint/65534: Permission denied" in line, line
    assert "chmod 1777 /var/lib/idmint" in line, line


# -- the container entrypoint -------------------------------------------------------------------


def _stub_idmint(shared: Path) -> Path:
    """A directory with an ``idmint`` that runs ``idmint generate`` for ``idmint serve``
    (this checkout's), so the entrypoint starts a process that mints."""
    directory = shared / "bin"
    directory.mkdir()
    stub = directory / "idmint"
    stub.write_text(
        "#!/bin/sh\n"
        '[ "$1" = serve ] && shift\n'
        f'exec {shlex.quote(sys.executable)} -m idmint generate "$@"\n'
    )
    stub.chmod(0o755)
    return directory


def test_two_containers_run_only_on_a_pool_shown_to_be_the_hosts(
    host: SimulatedHost, shared: Path
) -> None:
    """Through deploy/container-entrypoint: two containers on their own /dev/shm (a
    mount point, which the entrypoint took for the host's: 190,558 duplicates) are
    refused; on the host's /var/lib/idmint, after an idmint process of the host used
    it this boot, both run, and share the host's pool."""
    path = {"PATH": f"{_stub_idmint(shared)}:{BARE_PATH}"}
    entrypoint = ["sh", str(DEPLOY / "container-entrypoint")]
    count = ["--count", "200000"]

    def container(name: str, coordinator: str, *, volume: bool = True) -> Run:
        env = {**path, "IDMINT_COORDINATOR": coordinator}
        return _container(name, count, volume=volume, program=entrypoint, env=env)

    own_shm = [container(name, "local:///dev/shm", volume=False) for name in ("a", "b")]
    host_first = Run("host", _generate(1), before=[MAKE_POOL])
    hosts_pool = [container(name, "local://") for name in ("c", "d")]
    (refused, _, shared_pool) = host.boot(own_shm, [host_first], hosts_pool)

    twice = _duplicates(*(o.lines for o in refused.values()))
    assert not twice, f"{len(twice)} IDs minted by both containers on their own /dev/shm"
    for outcome in refused.values():
        line = _one_error_line(outcome, 2)
        assert "the pool directory /dev/shm is not shown to be the host's" in line, line
    assert not _failures(shared_pool)
    assert not _duplicates(*(o.lines for o in shared_pool.values()))
    assert _generator_of(shared_pool["c"]) != _generator_of(shared_pool["d"])


def _run_entrypoint(*setup: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """deploy/container-entrypoint in a container's own mount and pid namespaces, after
    ``setup`` (shell commands run there), with a stand-in ``idmint`` that says what it
    was given."""
    script = [
        "mount -t tmpfs tmpfs /mnt",
        "mkdir /mnt/stub",
        "printf '#!/bin/sh\\necho idmint \"$@\"\\n' > /mnt/stub/idmint",
        "chmod +x /mnt/stub/idmint",
        "mount -t tmpfs tmpfs /dev/shm",
        *setup,
        f"PATH=/mnt/stub:$PATH exec sh {DEPLOY / 'container-entrypoint'}",
    ]
    namespaces = ["unshare", "--mount", "--propagation", "private", "--pid", "--fork"]
    return subprocess.run(
        [*namespaces, "--mount-proc", "sh", "-ec", " && ".join(script)],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def _host_directory(tmp_path: Path, marker: bytes | None, name: str = ".host-0") -> Path:
    directory = tmp_path / "on-the-host"
    directory.mkdir()
    if marker is not None:
        (directory / name).write_bytes(marker)
    return directory


def _marker(*, boot: str | None = None, pid: str | None = None) -> bytes:
    """The marker this process (the host) leaves, with the fields given replaced."""
    made = host_marker()
    assert made is not None
    fields = made.decode().split()
    for index, given in enumerate((boot, pid)):
        if given is not None:
            fields[index] = given
    return (" ".join(fields) + "\n").encode()


MARKERS = {
    "another-boot": lambda: _marker(boot="00000000-0000-0000-0000-000000000000"),
    # An earlier run of this container, in a pid namespace of its own.
    "a-containers": lambda: _marker(pid="pid:[4026532999]"),
}
# Written in the container's own mount namespace, this boot, as if from the host's pid
# namespace: only the mount namespace gives it away.
OWN_MARKER = "$(cat /proc/sys/kernel/random/boot_id) pid:[4026531836] $(readlink /proc/self/ns/mnt)"


@pytest.mark.parametrize(
    ("coordinator", "marker", "mount"),
    [
        ("local:///dev/shm", None, None),
        ("local:///", None, None),
        ("local:///srv/pool", None, "tmpfs"),
        ("local:///srv/pool", None, "host"),
        ("local:///srv/pool", "another-boot", "host"),
        ("local:///srv/pool", "a-containers", "host"),
        ("local:///srv/pool", "its-own", "host"),
        ("local://", None, "var-lib"),
    ],
    ids=[
        "own-dev-shm",
        "root",
        "a-mount-point",
        "no-marker",
        "another-boot",
        "a-containers-marker",
        "its-own-marker",
        "own-var-lib",
    ],
)
def test_the_entrypoint_refuses_a_pool_not_shown_to_be_the_hosts(
    tmp_path: Path, coordinator: str, marker: str | None, mount: str | None
) -> None:
    setup = []
    if mount == "tmpfs":
        setup.append("mkdir -p /srv/pool && mount -t tmpfs tmpfs /srv/pool")
    elif mount == "host":
        made = MARKERS[marker]() if marker in MARKERS else None
        directory = _host_directory(tmp_path, made)
        if marker == "its-own":
            setup.append(f'echo "{OWN_MARKER}" > {directory}/.host-0')
        setup.append(f"mkdir -p /srv/pool && mount --bind {directory} /srv/pool")
    elif mount == "var-lib":
        setup.append("mount -t tmpfs tmpfs /var/lib && mkdir -p /var/lib/idmint/0")
    result = _run_entrypoint(*setup, env={"IDMINT_COORDINATOR": coordinator})
    assert result.returncode == 2, result
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("idmint: error: "), lines
    assert "not shown to be the host's" in lines[0], lines


@pytest.mark.parametrize("given", ["url", "variable", "host-pool"])
def test_the_entrypoint_accepts_a_pool_the_host_used_this_boot(tmp_path: Path, given: str) -> None:
    """The marker an idmint process of the host left (this test process is the host:
    the initial pid namespace, another mount namespace than the container's)."""
    if given == "host-pool":
        directory = _host_directory(tmp_path, None)
        (directory / "0").mkdir()
        marker = host_marker()
        assert marker is not None
        (directory / "0" / ".host").write_bytes(marker)
        setup = [
            "mount -t tmpfs tmpfs /var/lib",
            "mkdir /var/lib/idmint",
            f"mount --bind {directory} /var/lib/idmint",
        ]
        env = {"IDMINT_COORDINATOR": "local://"}
    else:
        directory = _host_directory(tmp_path, None)
        # A directory pool the host's idmint used: it leaves the marker itself.
        used = subprocess.run(
            [sys.executable, "-m", "idmint", "generate", "--coordinator", f"local://{directory}"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert used.returncode == 0, used.stderr
        assert (directory / f".host-{os.geteuid()}").is_file()
        setup = [f"mkdir -p /srv/pool && mount --bind {directory} /srv/pool"]
        env = (
            {"IDMINT_COORDINATOR": "local:///srv/pool"}
            if given == "url"
            else {"IDMINT_COORDINATOR": "local://", "IDMINT_LOCAL_DIR": "/srv/pool"}
        )
    result = _run_entrypoint(*setup, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "idmint serve\n"
