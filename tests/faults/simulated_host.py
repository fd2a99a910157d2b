"""A host of its own for the fault tests, made of namespaces: boot it, run processes, reboot.

A boot is ``unshare --mount --net``: a network namespace (so abstract UNIX
sockets, which hold this host's pool, are the simulated host's alone) and a
mount namespace in which ``/tmp``, ``/var/tmp``, ``/dev/shm`` and ``/run`` are
fresh tmpfs, as after a reboot, while ``/var/lib`` is a directory the test
keeps from boot to boot, as a disk. Inside, the processes of a *phase* start
together, each as the test describes it: another user (setpriv), its own
environment, a private ``/tmp`` and ``/var/tmp``, ``/dev/shm`` or ``/var/lib``,
a pid or network namespace of its own, ``ip netns exec``, a container (all of
those, with volumes of the host's), paths made read-only, a wall clock shifted
by the LD_PRELOAD shim. Phases run one after another in the same boot (a
service restarted).

Processes start with a bare environment (no ``IDMINT_LOCAL_DIR``: the test
session's private pool directory is not theirs), and run ``python -m idmint``
from this checkout; the directories they need stay reachable for any user.

Run as a script, this file is the boot's first process (the *agent*): it mounts,
runs the phases and writes what each process printed. It imports only the
standard library, all of it before it covers any directory.
"""

from __future__ import annotations

import configparser
import json
import os
import shlex
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["DEPLOY", "Outcome", "Run", "SimulatedHost", "as_unit"]

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
BARE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BARE_ENVIRONMENT = {
    "PATH": BARE_PATH,
    "LANG": "C.UTF-8",
    "HOME": "/",
    "PYTHONDONTWRITEBYTECODE": "1",
}
VOLATILE = ("/tmp", "/var/tmp", "/dev/shm", "/run")


@dataclass
class Run:
    """One process of a phase: ``idmint ARGS`` (or another module, or a Python program) and
    how it is started."""

    name: str
    args: list[str]
    """idmint's arguments; or, with ``code``, the Python program's."""
    code: str | None = None
    """Run ``python -c code ARGS`` instead of ``python -m idmint ARGS``."""
    module: str = "idmint"
    """The module ``python -m`` runs (``idmint.testing``: the contract kit)."""
    env: dict[str, str] = field(default_factory=dict)
    user: int | None = None
    """Run as this uid (and gid), with no supplementary groups."""
    private_tmp: bool = False
    """Its own /tmp and /var/tmp (systemd's PrivateTmp=)."""
    private_dev: bool = False
    """Its own /dev/shm (systemd's PrivateDevices=)."""
    pid_namespace: bool = False
    net_namespace: bool = False
    """Its own network namespace (``unshare --net``; systemd's PrivateNetwork=)."""
    private_var_lib: bool = False
    """Its own, empty ``/var/lib`` (a mount namespace of its own; a container's)."""
    volumes: list[str] = field(default_factory=list)
    """Paths of the host it sees at the same place over its own ``/var/lib``, ``/tmp``
    and ``/dev/shm`` (a container's volumes)."""
    program: list[str] | None = None
    """Run this command, then ``args``, instead of Python."""
    prefix: list[str] = field(default_factory=list)
    """Words run before the command, as root (``ip netns exec NAME``)."""
    read_only: list[str] = field(default_factory=list)
    """Paths mounted read-only for it (ProtectSystem=)..."""
    writable: list[str] = field(default_factory=list)
    """...except these (ReadWritePaths=)."""
    before: list[list[str]] = field(default_factory=list)
    """Commands run first, as root and unsandboxed (ExecStartPre=+)."""
    beside: list[list[str]] = field(default_factory=list)
    """Commands started first (as root, in the host's bare environment) and kept
    running until the phase ends; each is ready (and the phase goes on) once it has
    printed a line."""
    after: list[list[str]] = field(default_factory=list)
    """Commands run as root once the process has exited; what they print is
    :attr:`Outcome.after`."""
    clock_offset_ms: int = 0
    """Its wall clock this far from the real one (needs ``SimulatedHost(shim=...)``)."""


@dataclass
class Outcome:
    """What one process did."""

    returncode: int
    stdout: str
    stderr: str
    after: str

    @property
    def lines(self) -> list[str]:
        return self.stdout.split()


class SimulatedHost:
    """A host whose ``/var/lib`` lives in ``state`` between boots."""

    def __init__(
        self, state: Path, *, shim: Path | None = None, keep: tuple[Path, ...] = ()
    ) -> None:
        self.state = state
        self.var_lib = state / "var-lib"
        self.var_lib.mkdir(parents=True, exist_ok=True)
        self.shim = shim
        self.keep = keep
        """More directories of the test its processes reach (programs they run)."""
        self.boots = 0

    def boot(self, *phases: list[Run], timeout_s: float = 300) -> list[dict[str, Outcome]]:
        """Boot, run each phase's processes together, one phase after another, power off."""
        self.boots += 1
        out = self.state / f"boot-{self.boots}"
        out.mkdir()
        out.chmod(0o755)
        checkout = Path(__file__).resolve().parents[2]
        keep = [checkout, Path(sys.prefix), Path(sys.base_prefix), out, *self.keep]
        if self.shim is not None:
            keep.append(self.shim.parent)
        spec = {
            "keep": [str(path) for path in dict.fromkeys(keep)],
            "var_lib": str(self.var_lib),
            "python": sys.executable,
            "checkout": str(checkout),
            "shim": str(self.shim) if self.shim else None,
            "out": str(out),
            "phases": [[asdict(run) for run in phase] for phase in phases],
        }
        (out / "spec.json").write_text(json.dumps(spec))
        command = ["unshare", "--mount", "--net", "--fork", "--propagation", "private"]
        agent = subprocess.run(
            [*command, sys.executable, __file__, str(out / "spec.json")],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        assert agent.returncode == 0, f"the simulated host failed:\n{agent.stderr}"
        results = json.loads((out / "results.json").read_text())
        return [{name: Outcome(**outcome) for name, outcome in phase.items()} for phase in results]


def _unit() -> configparser.RawConfigParser:
    unit = configparser.RawConfigParser(strict=False, delimiters=("=",))
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(DEPLOY / "idmint.service")
    return unit


def as_unit(name: str, args: list[str], *, uid: int) -> Run:
    """A process in the sandbox deploy/idmint.service describes (as systemd would make it)."""
    service = _unit()["Service"]
    assert service.get("DynamicUser") == "yes"
    assert service.get("PrivateTmp") == "yes"
    assert service.get("ProtectSystem") == "strict"
    writable = service.get("ReadWritePaths", "").split()
    before = [
        shlex.split(line.strip().removeprefix("+"))
        for line in service.get("ExecStartPre", "").splitlines()
        if line.strip().startswith("+")
    ]
    return Run(
        name,
        args,
        user=uid,  # DynamicUser: a uid of its own
        private_tmp=True,
        private_dev=service.get("PrivateDevices") == "yes",
        read_only=["/var/lib"],  # ProtectSystem=strict, where it matters here
        writable=[path.lstrip("-") for path in writable],
        before=before,
    )


# -- the agent: runs inside the boot's namespaces ---------------------------------------


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def _set_up_host(keep: list[Path], var_lib: str) -> None:
    # Park what must survive the covering mounts, then put it back in place.
    _mount("-t", "tmpfs", "-o", "mode=0755", "tmpfs", "/mnt")
    for index, path in enumerate(keep):
        os.mkdir(f"/mnt/{index}")
        _mount("--bind", str(path), f"/mnt/{index}")
    _mount("--bind", var_lib, "/var/lib")
    for directory in VOLATILE:
        _mount("-t", "tmpfs", "-o", "mode=1777", "tmpfs", directory)
    # Any user must reach the kept paths: a directory on the way that others
    # may not enter (/root) is covered by an open one.
    covered: set[Path] = set()
    for path in keep:
        for ancestor in [*reversed(path.parents), path][1:-1]:
            try:
                closed = not os.stat(ancestor).st_mode & 0o001
            except FileNotFoundError:
                break
            if closed and ancestor not in covered:
                _mount("-t", "tmpfs", "-o", "mode=0755", "tmpfs", str(ancestor))
                covered.add(ancestor)
                break
    for index, path in enumerate(keep):
        os.makedirs(path, exist_ok=True)
        _mount("--bind", f"/mnt/{index}", str(path))


def _command(run: dict[str, object], spec: dict[str, object]) -> list[str]:
    args = list(map(str, run["args"]))  # type: ignore[call-overload]
    if run["program"] is not None:
        argv = [*run["program"], *args]  # type: ignore[misc]
    else:
        code = ["-c", str(run["code"])] if run["code"] is not None else ["-m", str(run["module"])]
        argv = [str(spec["python"]), *code, *args]
    if run["user"] is not None:
        uid = str(run["user"])
        argv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", *argv]
    argv = [*run["prefix"], *argv]  # type: ignore[misc]
    volumes: list[str] = run["volumes"]  # type: ignore[assignment]
    # A volume is set aside before the mounts that cover it, and put back after them.
    setup = [
        f"mkdir -p /run/volume-{index} && mount --bind {path} /run/volume-{index}"
        for index, path in enumerate(volumes)
    ]
    if run["private_var_lib"]:
        setup.append("mount -t tmpfs -o mode=0755 tmpfs /var/lib")
    if run["private_tmp"]:
        private = ("/tmp", "/var/tmp")
        setup += [f"mount -t tmpfs -o mode=1777 tmpfs {d}" for d in private]
        # A checkout or interpreter under /tmp (a CI job's clone) stays reachable,
        # from where _set_up_host parked it, as the rest of the host does.
        for index, path in enumerate(spec["keep"]):  # type: ignore[arg-type]
            if any(Path(path).is_relative_to(d) for d in private):
                setup.append(f"mkdir -p {path} && mount --bind /mnt/{index} {path}")
    if run["private_dev"]:
        setup.append("mount -t tmpfs -o mode=1777 tmpfs /dev/shm")
    for path in run["writable"]:  # type: ignore[attr-defined]
        setup.append(f"mount --bind {path} {path}")
    for path in run["read_only"]:  # type: ignore[attr-defined]
        setup.append(f"mount --rbind {path} {path} && mount -o remount,bind,ro {path}")
    setup += [
        f"mkdir -p {path} && mount --bind /run/volume-{index} {path}"
        for index, path in enumerate(volumes)
    ]
    if not (setup or run["pid_namespace"] or run["net_namespace"]):
        return argv
    unshare = ["unshare", "--mount", "--propagation", "private"]
    if run["net_namespace"]:
        unshare.append("--net")
    if run["pid_namespace"]:
        unshare += ["--pid", "--fork", "--mount-proc"]
    script = " && ".join([*setup, 'exec "$@"'])
    return [*unshare, "--", "sh", "-ec", script, "sh", *argv]


def _environment(run: dict[str, object], spec: dict[str, object]) -> dict[str, str]:
    env = dict(BARE_ENVIRONMENT)
    offset = int(run["clock_offset_ms"])  # type: ignore[call-overload]
    if offset:
        offset_file = Path(str(spec["out"])) / f"{run['name']}.clock"
        offset_file.write_text(f"{offset * 1_000_000}\n")
        env["LD_PRELOAD"] = str(spec["shim"])
        env["IDMINT_WALLCLOCK_OFFSET_FILE"] = str(offset_file)
    env.update(run["env"])  # type: ignore[call-overload]
    return env


def _run_phase(phase: list[dict[str, object]], spec: dict[str, object]) -> dict[str, object]:
    out = Path(str(spec["out"]))
    started = []
    beside: list[subprocess.Popen[bytes]] = []
    for run in phase:
        for before in run["before"]:  # type: ignore[attr-defined]
            subprocess.run(before, check=True)
        for command in run["beside"]:  # type: ignore[attr-defined]
            companion = subprocess.Popen(
                command, env=BARE_ENVIRONMENT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE
            )
            assert companion.stdout is not None
            if not companion.stdout.readline():
                raise RuntimeError(f"{command} ended before it was ready")
            beside.append(companion)
        name = str(run["name"])
        with open(out / f"{name}.out", "wb") as stdout, open(out / f"{name}.err", "wb") as stderr:
            started.append(
                (
                    name,
                    subprocess.Popen(
                        _command(run, spec),
                        env=_environment(run, spec),
                        stdin=subprocess.DEVNULL,
                        stdout=stdout,
                        stderr=stderr,
                        cwd="/",
                    ),
                )
            )
    results: dict[str, object] = {}
    for name, process in started:
        try:
            returncode = process.wait(timeout=240)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            returncode = process.wait()
        run = next(run for run in phase if run["name"] == name)
        after = [
            subprocess.run(command, capture_output=True, text=True, check=True).stdout
            for command in run["after"]  # type: ignore[attr-defined]
        ]
        results[name] = {
            "returncode": returncode,
            "stdout": (out / f"{name}.out").read_text(),
            "stderr": (out / f"{name}.err").read_text(),
            "after": "".join(after),
        }
    for companion in beside:
        companion.kill()
        companion.wait()
    return results


def _agent(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    _set_up_host([Path(path) for path in spec["keep"]], spec["var_lib"])
    results = [_run_phase(phase, spec) for phase in spec["phases"]]
    (Path(spec["out"]) / "results.json").write_text(json.dumps(results))


if __name__ == "__main__":
    _agent(sys.argv[1])
