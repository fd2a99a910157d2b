"""deploy/prometheus/idmint-alerts.yml: valid rules (``promtool check rules``), each alert
firing past its threshold and not before (``promtool test rules`` with
idmint-alerts.test.yml), and every metric they name one the server exports."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "idmint-alerts.yml"
RULE_TESTS = Path(__file__).with_name("idmint-alerts.test.yml")


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    # promtool comes with Debian's prometheus package (scripts/install-test-deps.sh).
    return subprocess.run(
        ["promtool", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_the_rules_are_valid() -> None:
    checked = _promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 3 rules found" in checked.stdout


def test_each_alert_fires_past_its_threshold_and_not_before() -> None:
    tested = _promtool("test", "rules", str(RULE_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_metric_the_rules_name_is_exported(server_url: str) -> None:
    named = set(re.findall(r"\bidmint_[a-z_]+\b", RULES.read_text()))
    assert named >= {
        "idmint_time_bits_remaining_seconds",
        "idmint_pool_free_identities",
        "idmint_pool_size",
        "idmint_exhausted_ticks_total",
    }
    exported = httpx.get(f"{server_url.rstrip('/')}/metrics").text
    families = set(re.findall(r"^# TYPE (\S+) ", exported, re.MULTILINE))
    assert named <= families, f"not exported: {sorted(named - families)}"
