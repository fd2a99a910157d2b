# The compiled core's interface, as core.py uses it (see _speedups.c).
from collections.abc import Callable, Iterator
from typing import Any

class Layout:
    def __init__(
        self,
        *,
        tick_ns: int,
        limit: int,
        step: int,
        max_ahead: int,
        identity: int,
        time_shift: int,
        low: int,
        high: int,
        reversed: bool,
    ) -> None: ...
    def base(self, tick: int, /) -> int: ...

class Run:
    until_ns: int
    @property
    def size(self) -> int: ...
    @property
    def tick(self) -> int: ...
    @property
    def armed(self) -> bool: ...
    @property
    def values(self) -> Run: ...
    def __init__(
        self,
        values: range,
        size: int,
        until_ns: int,
        from_ns: int = ...,
        clock: object | None = None,
    ) -> None: ...
    def __iter__(self) -> Iterator[int]: ...
    def __next__(self) -> int: ...
    def __length_hint__(self) -> int: ...
    def take(self, count: int, /) -> range: ...
    def arm(
        self, layout: Layout, tick: int, ceiling: int, deadline_mono_ns: int | None, /
    ) -> None: ...
    def disarm(self) -> None: ...

class HotPath:
    __wrapped__: Callable[..., Any]
    def __init__(
        self,
        *,
        kind: str,
        owner: type,
        pure: Callable[..., Any],
        run_slot: object,
        tick_slot: object,
        waits_slot: object,
        make_slot: object,
        id_type: type,
        int_slot: object,
        tag_slot: object | None,
        tag_shift: int,
        maker: Callable[[int], Any] | None,
        random_bits: int,
        batch_type: type,
        batch_slots: tuple[object, ...],
        mask: int | None,
        texts: Callable[..., Any],
        exhausted_slots: tuple[object, object] | None,
        placement: tuple[int, int, int, int, int] | None,
    ) -> None: ...
    def __call__(self, *args: Any) -> Any: ...
    def __get__(self, instance: object, owner: type | None = None) -> Any: ...
    def make(self, value: int, /) -> Any: ...
    def make_all(self, values: range, /) -> list[Any]: ...
    def place_all(self, values: range | list[int], /) -> list[int]: ...

def ints_of(values: range, mask: int | None, /) -> list[int]: ...
def texts_of(
    values: range | list[int], mask: int | None, form: int, digits: int, /
) -> list[str]: ...
def forks() -> int: ...
def configure(*, spin_ns: int, slice_ns: int, step_slack_ns: int) -> None: ...
