"""``idmint completion``: the script completes commands, options and their values in bash."""

from __future__ import annotations

import shutil
import subprocess
import sys

BASH = shutil.which("bash")


def complete(*words: str, shell: str = "bash") -> list[str]:
    """What bash offers after ``idmint WORDS`` (the last word being completed)."""
    assert BASH is not None, "bash is part of every Debian system"
    script = subprocess.run(
        [sys.executable, "-m", "idmint", "completion", shell],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    line = " ".join(f"'{word}'" for word in ("idmint", *words))
    probe = (
        f"{script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words)}; _idmint; "
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    done = subprocess.run([BASH, "-c", probe], capture_output=True, text=True, check=True)
    return sorted(done.stdout.split())


def test_commands() -> None:
    assert complete("ge") == ["generate"]
    assert "discovery" in complete("")


def test_options_and_their_values() -> None:
    assert complete("generate", "--node") == ["--node", "--node-bits"]
    assert complete("generate", "--scheme", "s") == ["short60"]
    assert complete("decode", "--format", "") == ["json", "text"]


def test_nested_commands_and_positionals() -> None:
    assert complete("claims", "") == ["--help", "-h", "list"]
    assert complete("completion", "") == ["--help", "-h", "bash", "zsh"]


def test_zsh_script_loads_bashcompinit() -> None:
    script = subprocess.run(
        [sys.executable, "-m", "idmint", "completion", "zsh"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "bashcompinit" in script
    assert script.rstrip().endswith("complete -F _idmint idmint")
