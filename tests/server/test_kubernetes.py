"""deploy/kubernetes/: the manifests name only what the server reads, and a StatefulSet
pod's index is a static identity that no other pod shares.

The manifests are parsed, not applied (there is no cluster here): every
``IDMINT_*`` variable must be one the server or the library reads, the probes'
paths must answer 200 on a server started with the manifest's own environment,
the ports must agree, and the identities of every pod's every worker must be
distinct and fit the scheme.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.cli_process import assert_one_error_line, run_idmint
from tests.server.server_helpers import running_server

from idmint import ConfigurationError, new_generator
from idmint.coordinate.base import POD_NAME_VARIABLE
from idmint.coordinate.static import POD_INDEX_VARIABLE, pod_index
from idmint.factory import new_generators
from idmint.server.config import SERVE_SETTINGS

MANIFESTS = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
READ_BY_IDMINT = {setting.variable for setting in SERVE_SETTINGS} | {
    POD_INDEX_VARIABLE,
    POD_NAME_VARIABLE,
}
POD_INDEX_LABEL = "metadata.labels['apps.kubernetes.io/pod-index']"


def _documents(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((MANIFESTS / name).read_text()) if doc]


def _workload(name: str) -> dict[str, Any]:
    (workload,) = [d for d in _documents(name) if d["kind"] in ("StatefulSet", "Deployment")]
    return workload


def _container(workload: dict[str, Any]) -> dict[str, Any]:
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    return container


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container["env"]}


MANIFEST_NAMES = ["statefulset.yaml", "deployment.yaml"]


@pytest.fixture(autouse=True)
def pool_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Static identities are held on this host: not in the pool other tests share."""
    monkeypatch.setenv("IDMINT_LOCAL_DIR", str(tmp_path / "pool"))


@pytest.mark.parametrize("name", MANIFEST_NAMES)
def test_every_variable_is_one_idmint_reads(name: str) -> None:
    names = set(_env(_container(_workload(name))))
    assert names <= READ_BY_IDMINT, names - READ_BY_IDMINT


@pytest.mark.parametrize("name", MANIFEST_NAMES)
def test_ports_services_and_probes_agree(name: str) -> None:
    workload = _workload(name)
    container = _container(workload)
    env = _env(container)
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"http": int(env["IDMINT_PORT"])}
    assert env["IDMINT_HOST"] == "0.0.0.0", "reachable from outside the pod"
    for probe, path in (("livenessProbe", "/livez"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"] == {"path": path, "port": "http"}
    labels = workload["spec"]["template"]["metadata"]["labels"]
    assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()
    for service in (d for d in _documents(name) if d["kind"] == "Service"):
        assert service["spec"]["selector"].items() <= labels.items()
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= set(ports)
    # A read-only root filesystem: the workers' run directory needs a writable /tmp.
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]


def test_the_statefulset_takes_each_pods_index_from_the_downward_api() -> None:
    statefulset = _workload("statefulset.yaml")
    env = _env(_container(statefulset))
    assert env[POD_INDEX_VARIABLE] == {"fieldRef": {"fieldPath": POD_INDEX_LABEL}}
    assert env["IDMINT_COORDINATOR"].startswith("static://?ordinal=pod")
    assert statefulset["spec"]["serviceName"] in {
        d["metadata"]["name"]
        for d in _documents("statefulset.yaml")
        if d["kind"] == "Service" and d["spec"].get("clusterIP") == "None"
    }


def test_the_statefulsets_pods_and_workers_hold_distinct_identities(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every worker of every pod, as ``idmint serve --workers`` makes them (offsets)."""
    statefulset = _workload("statefulset.yaml")
    env = _env(_container(statefulset))
    workers, per_worker = int(env["IDMINT_WORKERS"]), int(env["IDMINT_GENERATORS"])
    held: list[int] = []
    for index in range(statefulset["spec"]["replicas"]):
        monkeypatch.setenv(POD_INDEX_VARIABLE, str(index))
        for worker in range(workers):
            generators = new_generators(
                "uid64",
                per_worker,
                env["IDMINT_COORDINATOR"],
                offset=worker * per_worker,
            )
            held += [generator.generator for generator in generators]
            for generator in generators:
                generator.close()
    assert len(set(held)) == len(held), held


def test_the_marks_volume_is_made_what_the_host_pool_trusts() -> None:
    """Marks on a volume of the pod's own, made root's and sticky before the server starts."""
    statefulset = _workload("statefulset.yaml")
    pod = statefulset["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["securityContext"]["runAsUser"] == 0
    assert "chmod 1777 /var/lib/idmint" in " ".join(init["command"])
    mounts = {m["mountPath"]: m["name"] for m in _container(statefulset)["volumeMounts"]}
    claims = {c["metadata"]["name"] for c in statefulset["spec"]["volumeClaimTemplates"]}
    assert mounts["/var/lib/idmint"] in claims


def test_the_deployment_takes_its_coordinator_url_from_a_secret() -> None:
    env = _env(_container(_workload("deployment.yaml")))
    assert set(env["IDMINT_COORDINATOR"]) == {"secretKeyRef"}


def test_a_server_started_as_the_statefulset_starts_it_answers_its_probes() -> None:
    """The manifest's environment, as pod 1: probes 200; generators 2 and 3 (block 2)."""
    env = {
        name: value
        for name, value in _env(_container(_workload("statefulset.yaml"))).items()
        if isinstance(value, str)
    }
    with (
        running_server(env={**env, POD_INDEX_VARIABLE: "1"}) as server,
        server.client() as http,
    ):
        for path in ("/livez", "/readyz"):
            assert http.get(path).status_code == 200, path
        claims = http.get("/v1/claims").json()["claims"]
    identities = sorted(claim["identity"] for claim in claims)
    assert identities == ["generator 2 cluster 0", "generator 3 cluster 0"]


# -- the pod's index ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "hostname", "index"),
    [
        ({POD_INDEX_VARIABLE: "7"}, "whatever", 7),
        ({POD_INDEX_VARIABLE: " 12 "}, "ids-3", 12),
        ({}, "ids-3", 3),
        ({}, "id-server-0", 0),
        ({POD_INDEX_VARIABLE: ""}, "ids-41", 41),
    ],
)
def test_the_pod_index_comes_from_the_variable_else_the_host_name(
    environ: dict[str, str], hostname: str, index: int
) -> None:
    assert pod_index(environ, hostname) == index


@pytest.mark.parametrize(
    ("environ", "hostname", "problem"),
    [
        ({POD_INDEX_VARIABLE: "-1"}, "ids-3", "not a pod index"),
        ({POD_INDEX_VARIABLE: "three"}, "ids-3", "not a pod index"),
        ({POD_INDEX_VARIABLE: "٣"}, "ids-3", "not a pod index"),
        ({}, "ids", "needs this pod's index"),
        ({}, "ids-03", "needs this pod's index"),
        ({}, "-3", "needs this pod's index"),
    ],
)
def test_a_missing_or_malformed_pod_index_is_refused(
    environ: dict[str, str], hostname: str, problem: str
) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        pod_index(environ, hostname)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("static://?ordinal=pod&generator=3", "give no generator"),
        ("static://?ordinal=node", "ordinal must be pod"),
        ("static://?block=2", "block goes with ordinal=pod"),
        ("static://?ordinal=pod&block=0", "block 0 is out of range"),
    ],
)
def test_ordinal_urls_that_cannot_work_are_refused(url: str, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(problem)):
        new_generator("uid64", coordinator=url)


def test_a_block_too_small_for_the_workers_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pod 0 with 3 generators in a block of 2 would take pod 1's first ID."""
    monkeypatch.setenv(POD_INDEX_VARIABLE, "0")
    with pytest.raises(ConfigurationError, match="block=2"):
        new_generators("uid64", 3, "static://?ordinal=pod&block=2")


def test_the_cli_refuses_a_missing_pod_index_with_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(POD_INDEX_VARIABLE, "x1")
    result = run_idmint("generate", "--count", "1", "--coordinator", "static://?ordinal=pod")
    assert result.returncode == 2
    assert POD_INDEX_VARIABLE in assert_one_error_line(result.stderr)


def test_each_pod_index_gives_its_own_identity_per_scheme(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(POD_INDEX_VARIABLE, "5")
    url = "static://?ordinal=pod&block=3&first=10"
    with new_generator("uid64", coordinator=url) as uid:
        assert uid.generate().generator == 25
    with new_generator("short60", coordinator=url) as short:
        assert short.generate().node == 25
    with new_generator("elastic64", coordinator=url + "&node_bits=9") as elastic:
        assert elastic.generate().node == 25
