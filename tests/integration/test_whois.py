"""``idmint whois`` on every coordinator other processes share: the process that minted
an ID is named after it has exited, by another process, from what the coordinator
recorded beside the identity's mark."""

from __future__ import annotations

import json
import socket

from tests.cli_process import CliProcess, assert_one_error_line, now_ms, run_idmint
from tests.integration.claims_helpers import Backend, shared_backends

from idmint.schemes import Uid64


@shared_backends
def test_whois_names_a_minting_process_after_it_exited(backend: Backend) -> None:
    url = backend.url(ttl=2)
    started_ms = now_ms()
    with CliProcess("generate", "--scheme", "uid64", "--coordinator", url, "--count", "3") as cli:
        assert cli.wait(timeout=60) == 0, cli.stderr
        minter = cli.pid
    minted = [Uid64(line) for line in cli.lines]
    assert len(minted) == 3

    found = run_idmint("whois", str(minted[-1]), "--coordinator", url, "--format", "json")
    assert found.returncode == 0, found.stderr
    holder = json.loads(found.stdout)
    assert (holder["host"], holder["pid"]) == (socket.gethostname(), minter)
    assert started_ms - 1_000 <= holder["started"] <= holder["first_ms"]
    assert holder["first_ms"] <= minted[0].timestamp_ms <= holder["last_ms"] <= now_ms()
    assert holder["pod"] is None

    text = run_idmint("whois", str(minted[0]), "--coordinator", url)
    assert text.returncode == 0, text.stderr
    assert f"pid={minter} " in text.stdout

    # The identity's time before anyone held it: nothing recorded, said plainly.
    before = Uid64.build(
        timestamp_ms=started_ms - 86_400_000,
        sequence=0,
        generator=minted[0].generator,
        cluster=minted[0].cluster,
    )
    missing = run_idmint("whois", str(before), "--coordinator", url)
    assert missing.returncode == 1, missing.stderr
    assert "no holder" in assert_one_error_line(missing.stderr)


def test_whois_of_a_bad_id_is_one_line_and_status_2() -> None:
    for bad in ("not-an-id", "\x1b[31mred", "9" * 200):
        done = run_idmint("whois", bad)
        assert done.returncode == 2, done.stderr
        assert "invalid" in assert_one_error_line(done.stderr)
