"""README's console examples that print fixed output still print it.

A README line ``$ idmint ...`` followed by lines without ``$`` shows the output
of the command. Those of deterministic commands (decoding, encoding) are run
through ``idmint.cli.main`` and compared line for line; a ``generate`` example
shows what its output looks like, which depends on the clock.
"""

from __future__ import annotations

import io
import re
import shlex
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from idmint.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"
DETERMINISTIC = {"decode", "encode"}
"""Subcommands whose output depends only on their input (``generate`` reads the clock)."""


def console_examples() -> list[tuple[list[str], list[str]]]:
    """``(argv, expected stdout lines)`` for each README command shown with its output."""
    blocks = re.findall(r"```console\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    examples: list[tuple[list[str], list[str]]] = []
    for block in blocks:
        lines = block.splitlines()
        for index, line in enumerate(lines):
            words = line.split()
            if words[:2] != ["$", "idmint"] or len(words) < 3 or words[2] not in DETERMINISTIC:
                continue
            output = []
            for following in lines[index + 1 :]:
                if not following or following.startswith(("$", " ")):
                    break
                output.append(following)
            if output:
                examples.append((shlex.split(line[2:].split("#", 1)[0])[1:], output))
    return examples


EXAMPLES = console_examples()


def test_readme_shows_command_output_to_check() -> None:
    assert EXAMPLES, "no README example with output found; did the README's format change?"


@pytest.mark.parametrize(("argv", "expected"), EXAMPLES, ids=[" ".join(a) for a, _ in EXAMPLES])
def test_readme_example_prints_what_it_shows(argv: list[str], expected: list[str]) -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        status = main(argv)
    assert status == 0
    assert out.getvalue().splitlines() == expected
