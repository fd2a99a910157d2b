"""Errors across the worker boundary of ``idmint serve --workers N``.

A worker that cannot start sends its error to the supervisor, which raises it
as ``idmint serve``'s own: the CLI's exit status depends on its class. Every
class of :mod:`idmint.errors` (found, not listed) is raised in real worker
processes and must come out of the supervisor with its type, message,
attributes and exit status; once, ``ClockMovedBackwards`` and ``InvalidId``
came out as a TypeError, because they were rebuilt by calling their
constructors with one message.

The workers raise it through a ``sitecustomize`` on their ``PYTHONPATH`` that
makes ``idmint.factory.new_generators`` (what a worker calls to claim its
identities) raise the sample named by ``IDMINT_TEST_RAISE``.
"""

from __future__ import annotations

import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.cli_process import assert_one_error_line
from tests.server.error_samples import error_classes, sample
from tests.server.server_helpers import LOOPBACK

from idmint import errors
from idmint.server.run import serve

ROOT = Path(__file__).resolve().parents[2]
SERVE = [sys.executable, "-m", "idmint", "serve", "--host", LOOPBACK, "--port", "0"]
SITECUSTOMIZE = """
import os
import pickle

if os.environ.get("IDMINT_TEST_RAISE"):
    import idmint.factory
    from idmint import errors
    from tests.server.error_samples import sample

    def refuse(*args, **kwargs):
        error = sample(getattr(errors, os.environ["IDMINT_TEST_RAISE"]))
        # What was raised, as the worker made it: a message may depend on the
        # process (MissingExtra's install line on where idmint was found).
        sent = os.path.join(os.environ["IDMINT_TEST_SENT"], str(os.getpid()))
        with open(sent, "wb") as file:
            pickle.dump(error, file)
        raise error

    idmint.factory.new_generators = refuse
"""


@pytest.fixture
def raising_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """Workers started from here raise the sample named by ``IDMINT_TEST_RAISE``."""
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{ROOT}")
    monkeypatch.setenv("IDMINT_LOCAL_DIR", str(tmp_path / "pool"))
    (tmp_path / "sent").mkdir()
    monkeypatch.setenv("IDMINT_TEST_SENT", str(tmp_path / "sent"))
    return monkeypatch


def sent_by_a_worker(tmp_path: Path) -> errors.IdmintError:
    """One of the errors the workers raised (the samples are alike but for the process)."""
    sent = sorted((tmp_path / "sent").iterdir())
    assert sent, "no worker raised"
    error: errors.IdmintError = pickle.loads(sent[0].read_bytes())
    return error


def assert_same_error(got: BaseException, sent: errors.IdmintError, prefix: str = "") -> None:
    assert type(got) is type(sent), (type(got), type(sent))
    assert isinstance(got, errors.IdmintError)
    assert str(got) == prefix + str(sent)
    assert got.exit_status == type(sent).exit_status
    assert vars(got) == vars(sent)


@pytest.mark.parametrize("kind", error_classes(), ids=lambda kind: kind.__name__)
def test_every_error_crosses_from_a_worker_whole(
    kind: type[errors.IdmintError], raising_workers: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    raising_workers.setenv("IDMINT_TEST_RAISE", kind.__name__)
    with pytest.raises(errors.IdmintError) as raised:
        serve(host=LOOPBACK, port=0, workers=2)
    index = re.match(r"worker (\d): ", str(raised.value))
    assert index is not None, raised.value
    assert_same_error(raised.value, sent_by_a_worker(tmp_path), prefix=index.group(0))


@pytest.mark.parametrize("kind", [errors.ClockMovedBackwards, errors.InvalidId])
def test_the_cli_exits_with_the_workers_status(
    kind: type[errors.IdmintError], raising_workers: pytest.MonkeyPatch
) -> None:
    """The two that once became a TypeError, through ``idmint serve --workers 2``."""
    raising_workers.setenv("IDMINT_TEST_RAISE", kind.__name__)
    done = subprocess.run(
        [*SERVE, "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == kind.exit_status, done.stderr
    line = assert_one_error_line(done.stderr)
    assert re.fullmatch(rf"idmint: error: worker \d: {re.escape(str(sample(kind)))}", line)


@pytest.mark.parametrize("kind", error_classes(), ids=lambda kind: kind.__name__)
def test_every_error_pickles_whole(kind: type[errors.IdmintError]) -> None:
    """The other way out of a process (multiprocessing, concurrent.futures): pickle."""
    sent = sample(kind)
    assert_same_error(pickle.loads(pickle.dumps(sent)), sent)


def test_an_error_class_from_elsewhere_arrives_as_its_nearest_known_ancestor() -> None:
    class Stricter(errors.CoordinatorRefused):
        pass

    got = errors.error_from_json(errors.error_to_json(Stricter("no entry")), prefix="worker 3: ")
    assert type(got) is errors.CoordinatorRefused
    assert str(got) == "worker 3: no entry"
    assert got.exit_status == 77
