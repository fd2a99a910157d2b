"""Each scheme is described once: by its value type and its generator class.

A toy scheme, defined here and registered the way a new scheme is (its value type
in ``SCHEMES``, its generator class in ``GENERATORS``), shows up in the CLI, the
OpenAPI document, storage and pydantic, and mints through ``new_generator``,
with no edit anywhere else. The other tests hold every face to what the value
types and generator classes say, so that no table of per-scheme facts can
creep back in beside them.
"""

from __future__ import annotations

import ast
import datetime as _dt
import inspect
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pydantic
import pytest

import idmint
from idmint import _storage, cli
from idmint.errors import ConfigurationError, InvalidId
from idmint.factory import IDENTITY_OPTIONS, SCHEME_OPTIONS, new_generator, new_generators
from idmint.generate.core import DEFAULT_MAX_CLOCK_WAIT_MS, Claim, TickGenerator
from idmint.generate.generators import GENERATORS
from idmint.schemes import SCHEMES, Field, IdValue, int_from_hex, parse_id
from idmint.server.app import ROUTES
from idmint.server.config import ServerConfig
from idmint.server.openapi import openapi_document

SOURCE = Path(idmint.__file__).parent

# -- a toy scheme: 56 bits of ms, lane, sequence and node --------------------------------

TIMESTAMP_BITS, LANE_BITS, SEQUENCE_BITS, NODE_BITS = 42, 2, 8, 4
SEQUENCE_SHIFT = NODE_BITS
LANE_SHIFT = SEQUENCE_SHIFT + SEQUENCE_BITS
TIMESTAMP_SHIFT = LANE_SHIFT + LANE_BITS


class Toy56(IdValue):
    """A toy ID: 14 hex digits. Its layout (where each field lies), fields, text codec
    and build, and no more: the base derives the field properties, ``bytes``, ``str()``,
    ``time`` and ``to_dict()``."""

    __slots__ = ()
    scheme = "toy56"
    bits = 56
    _forms = "14 hex digits, 7 bytes or an int"
    summary = "7 bytes: ms, lane, sequence, 4-bit node; 256 IDs/ms"
    fields = (
        Field.at(
            "timestamp_ms",
            "ms since 1970-01-01 UTC",
            TIMESTAMP_SHIFT,
            TIMESTAMP_BITS,
            per_second=1000,
        ),
        Field.at("lane", "toy lane", LANE_SHIFT, LANE_BITS),
        Field.at("sequence", "position within the ms", SEQUENCE_SHIFT, SEQUENCE_BITS),
        Field.at("node", "node ID", 0, NODE_BITS),
    )
    timestamp_ms: int
    lane: int
    sequence: int
    node: int
    text_pattern = "[0-9a-f]{14}"
    text_length = 14
    json_description = "A toy56 ID: 14 hex digits"
    json_example = "0189f3c0a0b123"

    @classmethod
    def from_text(cls, text: str) -> Toy56:
        return cls.from_int(int_from_hex(cls.scheme, text.strip(), cls.text_length))

    @classmethod
    def text_of_int(cls, value: int) -> str:
        return f"{value:014x}"

    @classmethod
    def build(cls, *, timestamp_ms: int, node: int, lane: int = 0, sequence: int = 0) -> Toy56:
        return cls._trusted(
            cls._packed(timestamp_ms=timestamp_ms, lane=lane, sequence=sequence, node=node)
        )


class Toy56Generator(TickGenerator[Toy56]):
    """Mints toy56 IDs in one lane for one 4-bit node ID, claimed in the node-ID space."""

    __slots__ = ("_lane", "_node")
    id_type = Toy56
    identity_fields = ("node",)
    space = "node"

    def __init__(
        self,
        node: int | None = None,
        lane: int = 0,
        *,
        claim: Claim | None = None,
        clock: idmint.generate.Clock | None = None,
        max_clock_wait_ms: float = DEFAULT_MAX_CLOCK_WAIT_MS,
    ) -> None:
        super().__init__(
            limit=1 << SEQUENCE_BITS,
            seq_shift=SEQUENCE_SHIFT,
            clock=clock,
            max_clock_wait_ms=max_clock_wait_ms,
            claim=claim,
        )
        self._node = 0
        self._lane = lane
        if claim is not None:
            grant = claim.wait()
            with self._lock:
                self._adopt(grant)
        elif node is None:
            raise ConfigurationError("a toy56 generator needs its node ID")
        else:
            self._set_identity({"node": node})

    def _set_identity(self, identity: Mapping[str, int]) -> None:
        self._node = self.checked_identity(identity)["node"]

    def _base_for_tick(self, tick: int) -> int:
        return tick << TIMESTAMP_SHIFT | self._lane << LANE_SHIFT | self._node


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The toy scheme registered for one test, the way a new scheme is (monkeypatch
    takes it out again)."""
    monkeypatch.setitem(SCHEMES, Toy56.scheme, Toy56)
    monkeypatch.setitem(GENERATORS, Toy56.scheme, Toy56Generator)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# -- the toy scheme everywhere ---------------------------------------------------------


def test_a_scheme_that_declares_its_fields_and_codec_shows_every_view() -> None:
    toy = Toy56.build(timestamp_ms=1_700_000_000_123, lane=2, sequence=17, node=9)
    assert str(toy) == f"{int(toy):014x}"
    assert toy.bytes == int(toy).to_bytes(7, "big")
    assert Toy56.from_bytes(toy.bytes) == toy == Toy56(str(toy)) == Toy56(int(toy))
    assert toy.time == _dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=_dt.timezone.utc)
    assert toy.to_dict() == {
        "scheme": "toy56",
        "id": str(toy),
        "time": "2023-11-14T22:13:20.123Z",
        "timestamp_ms": 1_700_000_000_123,
        "lane": 2,
        "sequence": 17,
        "node": 9,
    }
    assert repr(toy) == f"Toy56('{toy}')"
    with pytest.raises(InvalidId, match="expected 7 bytes"):
        Toy56.from_bytes(bytes(8))
    with pytest.raises(InvalidId, match="out of range"):
        Toy56.from_int(1 << 56)


def test_a_scheme_must_say_which_field_counts_time() -> None:
    with pytest.raises(TypeError, match="one decoded field must count time"):

        class Timeless(IdValue):
            __slots__ = ()
            fields = (Field("count", "a count", 0, 9),)


def _subclasses(cls: type[IdValue]) -> list[type[IdValue]]:
    return [each for sub in cls.__subclasses__() for each in (sub, *_subclasses(sub))]


@pytest.mark.parametrize("view", ["time", "bytes", "__str__", "to_dict"])
def test_the_views_of_an_id_are_defined_once_in_the_base(view: str) -> None:
    redefined = [
        f"{id_type.__module__}.{id_type.__qualname__}"
        for id_type in _subclasses(IdValue)
        if id_type.__module__.startswith("idmint.") and view in vars(id_type)
    ]
    assert redefined == [], f"{view} is derived from the declared fields in IdValue"


@pytest.mark.usefixtures("toy")
def test_a_registered_scheme_is_listed_by_idmint_schemes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, _ = run_cli(capsys, "schemes")
    assert status == 0
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert list(lines) == list(SCHEMES)
    assert re.search(
        rf"{re.escape(Toy56.summary)}; time runs out in \d+ years \(generate: --node --lane\)$",
        lines["toy56"],
    )


@pytest.mark.usefixtures("toy")
def test_a_registered_scheme_is_encoded_with_flags_from_its_fields(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        run_cli(capsys, "encode", "--help")
    assert re.search(
        r"--lane LANE\s+toy lane \(toy56: 0\.\.3; default 0\)", capsys.readouterr().out
    )

    status, out, err = run_cli(
        capsys, "encode", "--scheme", "toy56", "--timestamp-ms", "1700000000000", "--node", "9",
        "--lane", "2", "--sequence", "17", "--format", "json",
    )  # fmt: skip
    assert (status, err) == (0, "")
    expected = Toy56.build(timestamp_ms=1_700_000_000_000, node=9, lane=2, sequence=17)
    assert json.loads(out) == expected.to_dict()

    status, _, err = run_cli(capsys, "encode", "--scheme", "toy56", "--timestamp-ms", "1")
    assert status == 2
    assert "toy56 needs --node" in err
    status, _, err = run_cli(
        capsys, "encode", "--scheme", "toy56", "--timestamp-ms", "1", "--node", "1", "--burst", "1"
    )
    assert status == 2
    assert "toy56 IDs have no --burst" in err
    status, _, err = run_cli(
        capsys, "encode", "--scheme", "toy56", "--timestamp-ms", "1", "--node", "16"
    )
    assert status == 2
    assert "node 16 is out of range; expected 0..15" in err


@pytest.mark.usefixtures("toy")
def test_a_registered_scheme_is_in_the_openapi_document() -> None:
    schemas = openapi_document(ServerConfig(max_count=10), ROUTES)["components"]["schemas"]
    decoded = schemas["DecodedToy56"]
    assert decoded["properties"]["scheme"] == {"type": "string", "enum": ["toy56"]}
    assert decoded["required"] == list(Toy56.build(timestamp_ms=0, node=0).to_dict())
    assert decoded["properties"]["lane"] == {"type": "integer", "minimum": 0, "maximum": 3}
    assert {"$ref": "#/components/schemas/DecodedToy56"} in schemas["Decoded"]["oneOf"]
    assert "toy56" in schemas["Ids"]["properties"]["scheme"]["enum"]


@pytest.mark.usefixtures("toy")
def test_a_registered_scheme_mints_through_new_generator(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Claimed: a free node ID on this host, from the toy's own range (0..15).
    with new_generator("toy56") as claimed:
        minted = [claimed.generate() for _ in range(600)]
        assert len(set(minted)) == 600
        assert {type(value) for value in minted} == {Toy56}
        assert len({value.node for value in minted}) == 1
        assert 0 <= minted[0].node <= 15
        assert minted == sorted(minted)
        # Held on this host: a second process (here, generator) cannot take it.
        with pytest.raises(idmint.IdentityInUse):
            new_generator("toy56", node=minted[0].node)
    # Configured: the node ID given, and consecutive ones for several generators.
    made = new_generators("toy56", 3, node=4)
    try:
        assert [generator.generate().node for generator in made] == [4, 5, 6]
    finally:
        for generator in made:
            generator.close()
    with pytest.raises(ConfigurationError, match=r"node 16 is out of range; expected 0\.\.15"):
        new_generator("toy56", node=16)
    with pytest.raises(ConfigurationError, match=r"static:// option node 20 is out of range"):
        new_generator("toy56", coordinator="static://?node=20")
    with pytest.raises(ConfigurationError, match="toy56 generators take no medallion option"):
        new_generator("toy56", medallion=5)
    assert IDENTITY_OPTIONS["toy56"] == ("node",)
    assert SCHEME_OPTIONS["toy56"] == {"node", "lane"}

    status, out, err = run_cli(capsys, "generate", "--scheme", "toy56", "--count", "3")
    assert (status, err) == (0, "")
    texts = out.split()
    assert len(set(texts)) == 3
    assert all(type(parse_id(text, "toy56")) is Toy56 for text in texts)
    status, out, _ = run_cli(capsys, "decode", "--scheme", "toy56", "--format", "json", texts[0])
    assert status == 0
    assert json.loads(out) == Toy56.from_text(texts[0]).to_dict()
    # The generator's own option is a flag of generate's, checked by the factory.
    status, out, err = run_cli(capsys, "generate", "--scheme", "toy56", "--lane", "2")
    assert (status, err) == (0, "")
    assert Toy56.from_text(out.strip()).lane == 2
    status, _, err = run_cli(capsys, "generate", "--scheme", "muid", "--lane", "2")
    assert status == 2
    assert err == "idmint: error: muid generators take no lane option; it applies to toy56\n"
    with pytest.raises(SystemExit):
        run_cli(capsys, "generate", "--help")
    assert re.search(
        r"--lane LANE\s+toy lane \(toy56: 0\.\.3; default 0\)", capsys.readouterr().out
    )


@pytest.mark.usefixtures("toy")
def test_a_registered_scheme_is_stored_and_validated_by_what_its_type_says() -> None:
    assert _storage.storage_kind(Toy56) == _storage.BIGINT  # 56 bits fit as they are
    value = Toy56.build(timestamp_ms=1_700_000_000_000, node=3)
    assert _storage.from_stored(Toy56, _storage.to_stored(value, native_uuid=False)) == value

    class Row(pydantic.BaseModel):
        id: Toy56

    assert Row.model_validate_json(json.dumps({"id": str(value)})).id == value
    with pytest.raises(pydantic.ValidationError, match="expected 14 hex digits"):
        Row.model_validate({"id": "12"})
    schema = Row.model_json_schema()["properties"]["id"]
    assert schema["pattern"] == f"^{Toy56.text_pattern}$"
    assert schema["examples"] == [Toy56.json_example]


def test_the_toy_is_gone_after_its_test() -> None:
    assert "toy56" not in SCHEMES
    assert "toy56" not in GENERATORS


# -- every face reads the schemes' own facts ----------------------------------------------


def decoded_schema_of(scheme: str) -> dict[str, Any]:
    schemas = openapi_document(ServerConfig(max_count=10), ROUTES)["components"]["schemas"]
    for name in schemas["Decoded"]["oneOf"]:
        schema: dict[str, Any] = schemas[name["$ref"].rsplit("/", 1)[1]]
        if scheme in schema["properties"]["scheme"]["enum"]:
            return schema
    raise AssertionError(f"no decoded schema for {scheme}")


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_the_openapi_ranges_are_the_value_types_field_ranges(scheme: str) -> None:
    id_type = SCHEMES[scheme]
    schema = decoded_schema_of(scheme)
    # A family shares one schema (uid64 and uid64-v1): its ranges span each member's.
    family = [member for member in SCHEMES.values() if member._family is id_type._family]
    assert schema["properties"]["scheme"]["enum"] == [member.scheme for member in family]
    decoded = [field for field in id_type.fields if field.decoded]
    assert list(schema["properties"])[3:] == [field.name for field in decoded]
    for field in decoded:
        documented = schema["properties"][field.name]
        if field.choices:
            assert documented == {"type": "string", "enum": list(field.choices)}
        else:
            ranges = [member.field(field.name) for member in family]
            assert documented == {
                "type": "integer",
                "minimum": min(each.low for each in ranges),
                "maximum": max(each.high for each in ranges),
            }


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_the_value_types_field_ranges_are_what_build_accepts(scheme: str) -> None:
    """Each field's range is the one its ``build()`` enforces: the edges pass, one past fails."""
    id_type = SCHEMES[scheme]
    required, optional = id_type.build_fields()
    base = {name: id_type.field(name).low for name in required}
    if "node_bits" in base:
        base["node_bits"] = id_type.field("node_bits").high  # the widest: every node fits
    build = id_type.build  # type: ignore[attr-defined]
    for name in (*required, *optional):
        field = id_type.field(name)
        if field.choices:
            build(**{**base, name: field.choices[0]})
            continue
        given = dict(base)
        if name == "burst":  # the widest burst goes with the narrowest node IDs
            given["node_bits"] = id_type.field("node_bits").low
        value = build(**{**given, name: field.high})
        if field.decoded:
            assert value.to_dict()[name] == field.high
        for outside in (field.low - 1, field.high + 1):
            with pytest.raises(InvalidId, match="out of range"):
                build(**{**given, name: outside})


@pytest.mark.parametrize("scheme", list(GENERATORS))
def test_generators_take_the_identities_their_value_types_can_hold(scheme: str) -> None:
    generator_class = GENERATORS[scheme]
    assert generator_class.id_type is SCHEMES[scheme]
    assert set(generator_class.identity_fields) <= set(generator_class.scheme_options())
    if generator_class.space is None:
        return
    pool = generator_class.identity_pool()
    counted = generator_class.identity_fields[0]
    field = SCHEMES[scheme].field(counted)
    assert field.low <= pool.start < pool.stop - 1 <= field.high
    last = {counted: pool.stop - 1}
    assert generator_class.checked_identity({**_others(generator_class), **last})[counted] == (
        pool.stop - 1
    )
    with pytest.raises(ConfigurationError, match="out of range"):
        generator_class.checked_identity({**_others(generator_class), counted: field.high + 1})


def _others(generator_class: type[TickGenerator[Any]]) -> dict[str, int]:
    return {
        name: SCHEMES[generator_class.id_type.scheme].field(name).low
        for name in generator_class.identity_fields[1:]
    }


def test_the_generators_take_the_options_their_signatures_name() -> None:
    for scheme, generator_class in GENERATORS.items():
        parameters = inspect.signature(generator_class.__init__).parameters
        assert set(SCHEME_OPTIONS[scheme]) == set(parameters) - {
            "self", "claim", "clock", "max_clock_wait_ms",
        }  # fmt: skip


def _flags_of(command: str, group: str | None = None) -> set[str]:
    """The long options of ``idmint COMMAND`` (in its argument group ``group``)."""
    (commands,) = [a for a in cli._build_parser()._actions if a.dest == "command"]
    parser = commands.choices[command]  # type: ignore[index]
    actions = (
        parser._actions
        if group is None
        else next(g for g in parser._action_groups if g.title == group)._group_actions
    )
    return {action.option_strings[-1] for action in actions if action.option_strings}


def _as_flags(names: set[str]) -> set[str]:
    return {"--" + name.replace("_", "-") for name in names}


def test_every_scheme_flag_is_an_option_of_a_generator_class_or_a_field_of_build() -> None:
    """The CLI names no generator option or field itself: its flags are the classes'."""
    taken = set().union(*(set(cls.scheme_options()) for cls in GENERATORS.values()))
    identities = set().union(*(set(cls.identity_fields) for cls in GENERATORS.values()))
    assert _flags_of("generate", "scheme options") == _as_flags(taken)
    assert _flags_of("serve", "scheme options") == _as_flags(taken - identities)
    built = set().union(*(set(sum(t.build_fields(), ())) for t in SCHEMES.values()))
    variants = set().union(*(set(t.variant_options) for t in SCHEMES.values()))
    assert variants, "snowflake's layout options"
    assert _flags_of("encode") - {"--help", "--scheme", "--format"} == _as_flags(built | variants)
    assert _flags_of("decode", "layout options") == _as_flags(variants)


# Modules above the schemes that take a scheme's facts from its value type or
# generator class; a string naming a scheme there is a fact kept twice.
_FACES = [
    "factory.py",
    "cli.py",
    "client.py",
    "_storage.py",
    "django.py",
    "sqlalchemy.py",
    "server/openapi.py",
    "coordinate/static.py",
    "schemes/_pydantic.py",
]


def _scheme_names_compared_or_keyed(path: Path) -> list[str]:
    """Scheme names used as dict keys or compared against, in ``path``'s code
    (reading the registry, ``SCHEMES["uid64"]``, is how a face asks a scheme)."""
    names = set(SCHEMES)
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        keys: list[ast.expr | None] = []
        if isinstance(node, ast.Dict):
            keys = list(node.keys)
        elif isinstance(node, ast.Compare):
            keys = [node.left, *node.comparators]
        for key in keys:
            if isinstance(key, ast.Constant) and key.value in names:
                found.append(f"{path.name}:{key.lineno}: {key.value!r}")
            if isinstance(key, ast.Tuple | ast.Set | ast.List):
                found += [
                    f"{path.name}:{item.lineno}: {item.value!r}"
                    for item in key.elts
                    if isinstance(item, ast.Constant) and item.value in names
                ]
    return found


@pytest.mark.parametrize("face", _FACES)
def test_no_table_of_per_scheme_facts_outside_the_schemes(face: str) -> None:
    """No dict keyed by scheme name, no ``scheme == "muid"`` branch, no value-type table."""
    path = SOURCE / face
    assert _scheme_names_compared_or_keyed(path) == []
    tree = ast.parse(path.read_text())
    value_types = {id_type.__name__ for id_type in SCHEMES.values()}
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            named = [k.id for k in node.keys if isinstance(k, ast.Name) and k.id in value_types]
            assert len(named) < 2, f"{face}:{node.lineno}: a table keyed by value type: {named}"


def test_the_schemes_import_no_circle() -> None:
    """Within idmint.schemes, imports (lazy ones and type-only ones too) point one way."""
    package = SOURCE / "schemes"
    graph: dict[str, set[str]] = {}
    for path in package.glob("*.py"):
        module = "idmint.schemes" + ("" if path.stem == "__init__" else f".{path.stem}")
        graph[module] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            graph[module] |= {t for t in targets if t.startswith("idmint.schemes")}
    graph = {module: {t for t in targets if t in graph} for module, targets in graph.items()}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for step in graph[start] - seen:
            if step == goal or reaches(step, goal, seen | {step}):
                return True
        return False

    circles = [module for module in graph if reaches(module, module, set())]
    assert circles == [], f"modules on an import circle: {circles}"
