"""The compiled core: in use where it can be, the same IDs as the pure core, and where
it hands over to it.

The other modules here run every test on both cores (tests/cores.py). These
check what only the comparison of the two shows: the compiled core is built and
in use where a C compiler is (and not where it must not be), it issues exactly
what the pure core issues for the same clock, it opens ticks and waits without
the Python core (else it would buy nothing), a fork it alone can see is refused,
values it cannot make fall back, and minting leaves no memory behind.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.cli_process import run_python_json
from tests.cores import MS, core_env, require_compiled_core

from idmint.errors import GeneratorError
from idmint.generate import (
    GENERATORS,
    Elastic64Generator,
    ManualClock,
    MuidGenerator,
    Short60Generator,
    SnowflakeGenerator,
    TickGenerator,
    Uid64Generator,
    Uid64V1Generator,
    Uuid7Generator,
    core,
)
from idmint.generate.core import IdBatch, RunPlacement, TickLayout
from idmint.generate.generators import _make_elastic64, _make_uuid7
from idmint.schemes import SCHEMES, Elastic64, IdValue, Uuid7
from idmint.schemes import uuid7 as uu

# -- where each core is used ---------------------------------------------------------------


def _compiled_core_can_be_built() -> str | None:
    """Why the compiled core cannot be built or used in this interpreter (None: it can)."""
    if not sys.platform.startswith("linux"):
        return "it is built on Linux only"
    if not getattr(sys, "_is_gil_enabled", lambda: True)():
        return "the GIL is disabled"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        return "Python's headers are not installed"
    if not (shutil.which("gcc") or shutil.which("cc")):
        return "there is no C compiler"
    return None


def test_the_compiled_core_is_in_use_where_it_can_be_built() -> None:
    """With a C compiler and Python's headers (scripts/test installs both, and its
    editable install builds the core), generators run on the compiled core; a
    missing build fails here rather than leaving every test on the pure core."""
    why_not = _compiled_core_can_be_built()
    pure_chosen = core._set_in_environment("IDMINT_PURE") or core.LOCKED_PATH_FORCED
    expected = os.environ.get("IDMINT_EXPECT_CORE") or (
        "python" if why_not is not None or pure_chosen else "c"
    )
    assert expected == core.CORE, (
        f"generators run on the {core.CORE!r} core, expected {expected!r} "
        f"({why_not or 'a C compiler and the headers are here'}): build the compiled one "
        "with `.venv/bin/pip install -e .`"
    )


def test_the_compiled_core_is_built_from_the_source_beside_it() -> None:
    """An editable install whose build failed would leave an older module in place:
    the module carries the SHA-256 of the source it was built from."""
    require_compiled_core()
    source = Path(core.__file__).with_name("_speedups.c")
    compiled = core._speedups
    assert compiled is not None
    built_from = compiled.source_sha256
    assert built_from == hashlib.sha256(source.read_bytes()).hexdigest(), (
        "the compiled core is older than its source: build it again with "
        "`IDMINT_BUILD_COMPILED_CORE=required .venv/bin/pip install --no-deps -e .`"
    )


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "c"),
        ({"IDMINT_PURE": "1"}, "python"),
        ({"IDMINT_PURE": "tru"}, "python"),
        ({"IDMINT_PURE": "0"}, "c"),
        ({"IDMINT_LOCKED": "1"}, "python"),
    ],
    ids=["default", "pure", "pure-typo", "pure-off", "locked"],
)
def test_the_environment_chooses_the_core(env: dict[str, str], expected: str) -> None:
    """``IDMINT_PURE`` (anything but 0/false/no/off: a typo costs speed, never safety)
    and ``IDMINT_LOCKED`` keep the pure core, and ``idmint --version`` says which is used;
    the methods are then the pure core's own functions, not the compiled ones."""
    require_compiled_core()
    base = {k: v for k, v in os.environ.items() if k not in {"IDMINT_PURE", "IDMINT_LOCKED"}}
    shown = run_python_json(
        """
        import json, types
        from idmint.generate import CORE, Uid64Generator, ManualClock
        on_system = Uid64Generator(1)
        on_manual = Uid64Generator(2, clock=ManualClock())
        print(json.dumps({
            "CORE": CORE,
            "system": on_system.core,
            "manual": on_manual.core,
            "function": isinstance(Uid64Generator.generate, types.FunctionType),
        }))
        """,
        {**base, **env},
    )
    assert shown == {
        "CORE": expected,
        "system": expected,
        "manual": "python",  # a clock of its own: the pure core
        "function": expected == "python",
    }
    version = subprocess.run(
        [sys.executable, "-m", "idmint", "--version"],
        env={**base, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert ("compiled core" in version) == (expected == "c"), version


ROOT = Path(__file__).resolve().parents[2]


def test_an_install_without_a_c_compiler_succeeds_on_the_pure_core(tmp_path: Path) -> None:
    """``CC=false pip install .``: the install succeeds, says once that the compiled core
    was not built and why, and idmint runs on the pure core."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "src", source / "src", ignore=shutil.ignore_patterns("*.so", "__pycache__")
    )
    target = tmp_path / "installed"
    installed = subprocess.run(
        [
            sys.executable,
            *("-m", "pip", "install", "-v", "--no-deps", "--no-index", "--no-build-isolation"),
            *("--no-cache-dir", "--target", str(target), str(source)),
        ],
        env={**os.environ, "CC": "false"},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    said = (installed.stdout + installed.stderr).count("idmint: the compiled core was not built")
    assert said == 1, installed.stdout + installed.stderr
    assert not list(target.glob("idmint/generate/_speedups*.so"))
    shown = run_python_json(
        """
        import json
        import idmint
        from idmint.generate import CORE, Uid64Generator
        minted = Uid64Generator(1).generate().generator
        print(json.dumps({"CORE": CORE, "minted": minted, "from": idmint.__file__}))
        """,
        {**core_env("c"), "PYTHONPATH": str(target)},
    )
    assert shown["from"].startswith(str(target))
    assert (shown["CORE"], shown["minted"]) == ("python", 1)


# -- the same IDs ----------------------------------------------------------------------------

PLAYED: dict[str, Callable[[Any], TickGenerator[Any]]] = {
    "uid64-spread": lambda clock: Uid64Generator(5, 1, clock=clock, max_clock_wait_ms=5),
    "uid64-time": lambda clock: Uid64Generator(5, 1, "time-sequential", clock=clock),
    "elastic64": lambda clock: Elastic64Generator(300, 9, max_ahead_ms=3, clock=clock),
    "short60": lambda clock: Short60Generator(7, clock=clock),
    "muid": lambda clock: MuidGenerator(2**48 + 3, max_ahead_us=50, clock=clock),
    "snowflake": lambda clock: SnowflakeGenerator(33, clock=clock, max_clock_wait_ms=5),
    "snowflake-sonyflake": lambda clock: SnowflakeGenerator(
        33, layout="sonyflake", clock=clock, max_clock_wait_ms=15
    ),
    "uuid7": lambda clock: Uuid7Generator(77, clock=clock, max_clock_wait_ms=5),
}

steps = st.lists(
    st.one_of(
        st.tuples(st.just("generate"), st.integers(1, 150)),
        st.tuples(st.just("nowait"), st.integers(1, 150)),
        st.tuples(st.just("batch"), st.integers(1, 700)),
        st.tuples(st.just("advance_ns"), st.integers(0, 3 * MS)),
        st.tuples(st.just("step_back_ns"), st.integers(0, 40 * MS)),
    ),
    max_size=25,
)


def _play(make: Callable[[Any], TickGenerator[Any]], script: list[tuple[str, int]]) -> list[Any]:
    """What a generator on the current core does with ``script``, on a ManualClock."""
    clock = ManualClock(start_ns=1_800_000_000_000 * MS + 123_456)
    generator = make(clock)
    # The bits drawn at random (uuid7's) differ between any two runs: all else must not.
    placement = generator._placement
    kept = ~placement.noise_mask if placement is not None else -1
    seen: list[Any] = []
    for action, amount in script:
        try:
            if action == "generate":
                seen.append([generator.generate().int & kept for _ in range(amount)])
            elif action == "nowait":
                made = (generator.generate_nowait() for _ in range(amount))
                seen.append([None if value is None else value.int & kept for value in made])
            elif action == "batch":
                seen.append([value & kept for value in generator.batch(amount).ints()])
            else:
                getattr(clock, action)(amount)
        except GeneratorError as error:
            seen.append(f"{type(error).__name__}: {error}")
    counters = (generator.issued, generator.clock_waits, generator.clock_steps_back)
    return [*seen, counters, clock.sleeps, generator.core]


@pytest.mark.parametrize("scheme", list(PLAYED))
@settings(max_examples=80, deadline=None)
@given(script=steps)
def test_both_cores_issue_the_same_ids_for_the_same_clock(
    scheme: str, script: list[tuple[str, int]]
) -> None:
    """A script of calls, clock moves and steps back, played on each core: the same
    IDs, errors (messages included), waits, counters and sleeps. (Not fences: after
    one the pure core drops the value it took before it looked at the clock, and
    the compiled core looks first, so their sequence numbers part; see
    test_a_fenced_generator_comes_back_to_python.)"""
    require_compiled_core()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(core, "_compiled_clocks", "any")
        compiled = _play(PLAYED[scheme], script)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(core, "_compiled_clocks", "none")
        pure = _play(PLAYED[scheme], script)
    assert compiled.pop() == "c"
    assert pure.pop() == "python"
    assert compiled == pure


def test_random_bits_come_from_the_compiled_core_and_differ() -> None:
    """short60 with random bits on the compiled core: 9 random low bits per ID,
    all IDs distinct, the sequence the pure core would take."""
    require_compiled_core()
    clock = ManualClock()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(core, "_compiled_clocks", "any")
        generator = Short60Generator(random=True, clock=clock)
    assert generator.core == "c"
    ids = [generator.generate() for _ in range(512)] + list(generator.batch(600))
    assert len({i.int for i in ids}) == len(ids)
    assert len({i.int & 511 for i in ids}) > 400  # 1,112 draws of 9 bits
    assert {i.sequence for i in ids[:512]} == set(range(512))


# -- texts ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: Uid64Generator(7),
        lambda: Uid64Generator(8, mode="time-sequential"),
        lambda: Uid64V1Generator(9),
        lambda: Elastic64Generator(300, 11, max_ahead_ms=0),
        lambda: Elastic64Generator(65_000, 16, max_ahead_ms=0),
        lambda: Short60Generator(17),
        lambda: Short60Generator(random=True),
        lambda: SnowflakeGenerator(1023),
        lambda: SnowflakeGenerator(65_535, layout="sonyflake"),
    ],
    ids=[
        "uid64",
        "uid64-time",
        "uid64-v1",
        "elastic64/11",
        "elastic64/16",
        "short60",
        "short60-random",
        "snowflake",
        "snowflake-sonyflake",
    ],
)
def test_compiled_texts_are_the_value_types_own(make: Callable[[], TickGenerator[Any]]) -> None:
    """uid64's hex, elastic64's decimal and short60's base-64 digits come from the
    compiled core (it checked them against the value type's own), for a batch kept as
    a range and for one across ticks kept as a list; they are what the value type
    itself writes."""
    require_compiled_core()
    generator = make()
    assert type(generator)._batch_texts.__class__.__name__ == "_CompiledTexts"
    id_type = generator.id_type
    for batch in (generator.batch(3), generator.batch(5 * generator.ids_per_tick + 1)):
        assert batch.texts() == [id_type.text_of_int(value) for value in batch.ints()]
        assert batch.texts() == [str(value) for value in batch]


@pytest.mark.parametrize("scheme", ["uid64", "uid64-v1", "elastic64", "short60", "snowflake"])
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_compiled_texts_of_any_ints(scheme: str, data: st.DataObject) -> None:
    require_compiled_core()
    id_type = SCHEMES[scheme]
    renderer = GENERATORS[scheme]._batch_texts
    ints = data.draw(st.lists(st.integers(0, id_type._max_int), max_size=20))
    assert renderer(ints) == [id_type.text_of_int(value) for value in ints]


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.integers(-(2**70), 2**131), min_size=1, max_size=8))
def test_the_compiled_core_reads_every_int_up_to_128_bits_and_refuses_the_rest(
    values: list[int],
) -> None:
    """Ints read from a list (a batch's run values across ticks) as the compiled core reads
    them: each below 2**128 whole (here masked to its low 64 bits and shown in hex), any
    negative or wider one refused with OverflowError, never read wrong."""
    require_compiled_core()
    assert core._speedups is not None
    low = (1 << 64) - 1
    if all(0 <= value < 1 << 128 for value in values):
        shown = core._speedups.texts_of(values, low, 0, 16)
        assert shown == [f"{value & low:016x}" for value in values]
    else:
        with pytest.raises(OverflowError):
            core._speedups.texts_of(values, low, 0, 16)


def test_a_value_type_whose_texts_no_compiled_form_makes_keeps_its_own() -> None:
    """muid's texts are upper-case hex of 128 bits: no compiled form makes them."""
    require_compiled_core()
    assert GENERATORS["muid"]._batch_texts == SCHEMES["muid"].texts_of_ints


# -- what the compiled core does without Python ----------------------------------------------


def _counting_take_locked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    take_locked = TickGenerator._take_locked

    def counted(self: TickGenerator[Any], want: int) -> Any:
        calls.append(want)
        return take_locked(self, want)

    monkeypatch.setattr(TickGenerator, "_take_locked", counted)
    return calls


@pytest.mark.parametrize("layout", ["twitter", "sonyflake"])
def test_the_compiled_core_opens_snowflake_ticks_without_python(
    layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Snowflake's layouts are the compiled core's too (Sonyflake's 10 ms ticks
    included): once armed, it opens the ticks after the first by itself."""
    require_compiled_core()
    calls = _counting_take_locked(monkeypatch)
    generator = SnowflakeGenerator(9, layout=layout)
    assert generator.core == "c"
    per_tick = generator.ids_per_tick
    ids = [value for _ in range(12) for value in generator.batch(per_tick).ints()]
    assert len(set(ids)) == len(ids) == per_tick * 12
    assert len(calls) <= 2, f"the Python core opened {len(calls)} ticks of 12"
    assert generator._run.armed


@pytest.mark.parametrize("call", ["generate", "batch"])
def test_the_compiled_core_opens_ticks_and_waits_without_python(
    call: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """uid64 past its cap for 30 ticks on the system clock: the pure core opens each tick
    under the lock; the compiled one, once armed by the first, opens and waits for
    the other 29 itself."""
    require_compiled_core()
    calls = _counting_take_locked(monkeypatch)
    generator = Uid64Generator(9)
    assert generator.core == "c"
    ids = (
        [generator.generate().int for _ in range(64 * 30)]
        if call == "generate"
        else [value for _ in range(30) for value in generator.batch(64).ints()]
    )
    assert len(set(ids)) == len(ids) == 64 * 30
    assert generator.clock_waits >= 25
    assert len(calls) <= 2, f"the Python core opened {len(calls)} ticks of 30"
    assert generator._run.armed


class _CountedNoise:
    """An endless iterator of zeros that counts what is taken from it."""

    def __init__(self) -> None:
        self.drawn = 0

    def __iter__(self) -> _CountedNoise:
        return self

    def __next__(self) -> int:
        self.drawn += 1
        return 0


def test_the_compiled_core_makes_uuid7s_and_opens_their_ticks_without_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """uuid7's run values are placed in their UUIDs (the counter split around the variant)
    and given their random bits in C, not by the Python maker, and the compiled core
    opens the milliseconds after the first itself."""
    require_compiled_core()
    calls = _counting_take_locked(monkeypatch)
    noise = _CountedNoise()  # what the Python maker draws its random bits from
    monkeypatch.setattr("idmint.generate.core._noise", noise)
    generator = Uuid7Generator(0xBEEF)
    assert generator.core == "c"
    ids: list[Uuid7] = []
    while len(ids) < 3000 or len({value.timestamp_ms for value in ids}) < 4:
        ids.append(generator.generate())
    assert len(calls) <= 2, f"the Python core opened {len(calls)} of the ticks"
    assert noise.drawn <= len(calls)  # the maker made only the first UUID of Python's ticks
    assert generator._run.armed
    assert all(type(value) is Uuid7 and value.node == 0xBEEF for value in ids)
    assert all(earlier < later for earlier, later in itertools.pairwise(ids))
    for value in ids:
        assert value.int & uu.VERSION_VARIANT_MASK == uu.VERSION_VARIANT_BITS
    first_ms = [value for value in ids if value.timestamp_ms == ids[0].timestamp_ms]
    assert [value.counter for value in first_ms] == list(range(len(first_ms)))
    randoms = [value.random for value in ids]
    assert len(set(randoms)) >= len(randoms) - 1  # 40 fresh bits each
    # A batch places its run values in C too: the same layout, fresh bits, still in order.
    batch = generator.batch(700)
    assert ids[-1] < batch[0]
    assert batch.ints() == [value.int for value in batch]
    assert len({value.random for value in batch}) >= 699
    assert {value.node for value in batch} == {0xBEEF}


def test_a_placement_wider_than_the_compiled_core_makes_is_left_to_the_maker() -> None:
    """A placement whose IDs pass 128 bits: the compiled core, checking its values against
    the maker's when the class is made, sees it cannot make them, and calls the maker for
    every UUID; batches are placed in Python. The IDs stay whole and in order."""
    require_compiled_core()
    right = Uuid7Generator._placement
    assert right is not None
    wide = RunPlacement(
        right.split, right.high_shift + 40, right.low_shift, right.fixed, right.noise_bits
    )

    class Widened(Uuid7Generator):
        __slots__ = ()
        id_type = Uuid7
        _placement = wide
        _make_from_run = staticmethod(wide.maker(Uuid7))

    generator = Widened(0x1234)
    assert generator.core == "c"
    with pytest.raises(TypeError):
        Widened.generate.place_all(range(3))  # type: ignore[attr-defined]
    ids = [generator.generate().int for _ in range(200)] + generator.batch(100).ints()
    assert all(value.bit_length() > 128 for value in ids)
    assert {(value >> uu.NODE_SHIFT) & uu.MAX_NODE for value in ids} == {0x1234}
    assert ids == sorted(set(ids))


def test_a_child_of_fork_never_hands_out_its_parents_random_bits() -> None:
    """The compiled core reads random bytes from the kernel ahead of use; a child of
    fork() drops them, or parent and child would give their UUIDs the same bits."""
    require_compiled_core()
    make = Uuid7Generator.generate.make
    make(1)  # the parent has read ahead
    reading, writing = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next 200 draws, then out without running anything else
        os.close(reading)
        drawn = " ".join(str(make(1).int & uu.MAX_RANDOM) for _ in range(200))
        os.write(writing, drawn.encode())
        os._exit(0)
    os.close(writing)
    with os.fdopen(reading) as pipe:
        child = {int(word) for word in pipe.read().split()}
    os.waitpid(pid, 0)
    parent = {make(1).int & uu.MAX_RANDOM for _ in range(200)}
    assert len(child) == len(parent) == 200
    assert child.isdisjoint(parent)


def test_the_pure_maker_and_the_declared_placement_agree() -> None:
    """uuid7's maker writes its placement out for speed: it must be the declared one."""
    placement = Uuid7Generator._placement
    assert placement is not None
    for run_value in (0, 1, (1 << 86) - 1, 0x0123_4567_89AB_CDEF_0123_45 & ((1 << 86) - 1)):
        made = _make_uuid7(run_value)
        assert made.int == placement.apply(run_value, made.int & placement.noise_mask)


def test_a_fenced_generator_comes_back_to_python() -> None:
    """A fence (what a claim in doubt does) disarms the compiled run: the next tick is
    the Python core's to open, which consults the claim."""
    require_compiled_core()
    generator = Uid64Generator(10)
    generator.generate()
    assert generator._run.armed
    generator._fence()
    assert not generator._run.armed
    generator.batch(70)  # into the next tick, opened by the Python core and armed again
    assert generator._run.armed


def test_a_layout_that_disagrees_with_the_scheme_is_never_used() -> None:
    """A declared layout is checked against ``_base_for_tick``: one that would make other
    values leaves every tick to the Python core, and the IDs stay right."""
    require_compiled_core()

    class Misdeclared(Uid64Generator):
        __slots__ = ()

        def _tick_layout(self) -> TickLayout:
            right = super()._tick_layout()
            return TickLayout(right.identity, right.time_shift, right.low, right.high)

    generator = Misdeclared(11)  # spread mode: the declaration leaves the reversal out
    assert generator.core == "c"
    ids = list(generator.batch(64 * 3))
    assert generator._layout is False
    assert not generator._run.armed
    assert [i.sequence for i in ids] == [n % 64 for n in range(64 * 3)]
    assert len({i.timestamp_ms for i in ids}) == 3


def test_a_maker_the_compiled_core_cannot_copy_is_called() -> None:
    """A class whose run values become values its own way (here elastic64 with the width
    shown one more): the compiled core's slot layout makes something else, which it
    sees when the class is made, so it calls the class's maker for every value."""
    require_compiled_core()

    def widened(tagged: int) -> Elastic64:
        made = _make_elastic64(tagged)
        made._node_bits += 1
        return made

    class Widened(Elastic64Generator):
        __slots__ = ()
        id_type = Elastic64
        _make_from_run = staticmethod(widened)

        def __init__(self, node: int, node_bits: int) -> None:
            super().__init__(node, node_bits, max_ahead_ms=0)
            self._make = widened  # the Python core's maker, for the first value of a tick

    generator = Widened(5, 9)
    assert generator.core == "c"
    values = [generator.generate() for _ in range(100)]
    assert {value.node_bits for value in values} == {10}
    assert len({value.int for value in values}) == 100


class Wide(IdValue):
    """A 140-bit toy value: wider than the compiled core makes."""

    __slots__ = ()
    scheme = "wide140"


class WideGenerator(TickGenerator[Wide]):
    """Ticks whose values need 140 bits: the compiled core refuses them."""

    __slots__ = ()
    id_type = Wide

    def __init__(self) -> None:
        super().__init__(limit=4, seq_shift=0)

    def _base_for_tick(self, tick: int) -> int:
        return tick << 100

    def _tick_layout(self) -> TickLayout:
        return TickLayout(0, 100, 0, (1 << 42) - 1)


def test_values_wider_than_the_compiled_core_fall_back_to_the_pure_core() -> None:
    require_compiled_core()
    generator = WideGenerator()
    assert generator.core == "c"
    values = [generator.generate().int for _ in range(10)]
    assert generator.core == "python"  # the first wide run moved it
    values += generator.batch(10).ints()
    assert len(set(values)) == 20
    assert all(value.bit_length() > 128 for value in values)


def test_a_batch_of_values_wider_than_the_compiled_core_makes_reads_in_python() -> None:
    """A batch kept as a range of ints over 128 bits: ints() and texts() are Python's."""
    require_compiled_core()
    wide = range(1 << 130, (1 << 130) + 3 * 7, 7)
    batch = IdBatch(wide, int, None, lambda ints: [hex(i) for i in ints])
    assert batch.ints() == list(wide)
    assert batch.texts() == [hex(i) for i in wide]


def test_a_fork_that_bypasses_os_fork_is_refused_on_the_compiled_core() -> None:
    """fork() called from C (here through ctypes, holding the GIL) runs none of
    ``os.fork()``'s hooks; the compiled core counts every fork and refuses in the
    child as the Python core would after ``os.fork()``: within the tick the parent
    opened, at the next one, and in a muid transaction opened before. (The pure core
    cannot see such a fork.)"""
    require_compiled_core()
    shown = run_python_json(
        """
        import ctypes, json, os
        from idmint.generate import core, ManualClock, Uid64Generator
        core._compiled_clocks = "any"  # clocks held still: the child stays in the tick
        from idmint.generate import MuidGenerator
        clock = ManualClock()
        within, after = Uid64Generator(12, clock=clock), Uid64Generator(13, clock=clock)
        within.generate(), after.generate()
        transaction = MuidGenerator().transaction()
        transaction.new()
        pid = ctypes.PyDLL(None).fork()
        if pid == 0:
            outcomes = []
            for mint, move in ((within.generate, 0), (after.generate, 1), (transaction.new, 0)):
                clock.advance_ms(move)
                try:
                    mint()
                    outcomes.append("minted")
                except Exception as error:
                    outcomes.append(type(error).__name__)
            os.write(1, (json.dumps({"child": outcomes}) + "\\n").encode())
            os._exit(0)
        os.waitpid(pid, 0)
        """,
        core_env("c"),
    )
    assert shown == {"child": ["GeneratorForked"] * 3}


# -- memory ------------------------------------------------------------------------------------


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize(
    "make",
    [
        # Borrowing ahead, so 10 M IDs need no waiting: the ticks the compiled core opens.
        lambda: Elastic64Generator(12, 8, max_ahead_ms=60_000),
        lambda: MuidGenerator(max_ahead_us=60_000_000),  # 128-bit values
        lambda: Uuid7Generator(12),  # 128-bit values, random bits drawn in C
    ],
    ids=["elastic64", "muid", "uuid7"],
)
def test_ten_million_ids_leave_the_memory_as_it_was(make: Callable[[], Any]) -> None:
    """10 M generate() calls on the compiled core, after 1 M to warm up: resident memory
    grows by less than 8 MB (one leaked object per call would be 300 MB and more;
    muid opens a tick for every ID, so one per tick as well)."""
    require_compiled_core()
    generator = make()
    assert generator.core == "c"
    take = generator.generate
    for _ in range(1_000_000):
        take()
    before = _rss_bytes()
    for _ in range(10_000_000):
        take()
    grown = _rss_bytes() - before
    assert grown < 8 << 20, f"resident memory grew by {grown / 2**20:.1f} MB"


def test_ten_million_uuid7s_in_batches_leave_the_memory_as_it_was() -> None:
    """uuid7 batches, placed in C: 10,000 batches of 1,000 (and their ints) after 1,000
    to warm up leave resident memory within 8 MB."""
    require_compiled_core()
    generator = Uuid7Generator(13)
    assert generator.core == "c"
    for _ in range(1_000):
        generator.batch(1_000).ints()
    before = _rss_bytes()
    for _ in range(10_000):
        generator.batch(1_000).ints()
    grown = _rss_bytes() - before
    assert grown < 8 << 20, f"resident memory grew by {grown / 2**20:.1f} MB"
