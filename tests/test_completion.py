"""``idmint completion``: the script completes commands, options and their values, in bash
and in fish (Debian's fish, which scripts/install-test-deps.sh installs)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

BASH = shutil.which("bash")
FISH = shutil.which("fish")


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
    assert complete("generate", "--scheme", "sh") == ["short60"]
    assert complete("generate", "--layout", "s") == ["sonyflake"]
    assert complete("decode", "--format", "") == ["json", "text"]


def test_nested_commands_and_positionals() -> None:
    assert complete("claims", "") == ["--help", "-h", "list"]
    assert complete("completion", "") == ["--help", "-h", "bash", "fish", "zsh"]


def test_zsh_script_loads_bashcompinit() -> None:
    script = subprocess.run(
        [sys.executable, "-m", "idmint", "completion", "zsh"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "bashcompinit" in script
    assert script.rstrip().endswith("complete -F _idmint idmint")


def fish_complete(line: str, tmp_path: Path) -> dict[str, str]:
    """What fish offers for the command line ``line``: each candidate with its description."""
    assert FISH is not None, "scripts/install-test-deps.sh installs fish"
    script = tmp_path / "idmint.fish"
    script.write_text(
        subprocess.run(
            [sys.executable, "-m", "idmint", "completion", "fish"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    done = subprocess.run(
        [FISH, "--no-config", "-c", f"source {script}; complete -C {shlex.quote(line)}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert done.stderr == ""
    offered = [candidate.partition("\t") for candidate in done.stdout.splitlines()]
    return {word: about for word, _, about in offered}


def test_fish_completes_commands_with_what_they_do(tmp_path: Path) -> None:
    assert fish_complete("idmint ge", tmp_path) == {"generate": "mint IDs, one per line"}
    assert set(fish_complete("idmint ", tmp_path)) == {
        *("generate", "decode", "encode", "bounds", "schemes", "completion", "serve"),
        *("claims", "whois", "discovery", "fetch"),
    }
    assert fish_complete("idmint claims ", tmp_path) == {"list": "who holds which generator ID"}
    assert set(fish_complete("idmint discovery ", tmp_path)) == {"register", "list"}
    assert set(fish_complete("idmint completion ", tmp_path)) == {"bash", "zsh", "fish"}


def test_fish_completes_options_and_their_values(tmp_path: Path) -> None:
    assert set(fish_complete("idmint generate --node", tmp_path)) == {"--node", "--node-bits"}
    assert set(fish_complete("idmint generate --count 3 --gene", tmp_path)) == {
        "--generator",
        "--generators",
    }
    assert set(fish_complete("idmint generate --scheme s", tmp_path)) == {"short60", "snowflake"}
    assert set(fish_complete("idmint decode --format ", tmp_path)) == {"json", "text"}
    # Each command its own options: claims list has no --scheme.
    assert fish_complete("idmint claims list --sch", tmp_path) == {}
    assert "--service" in fish_complete("idmint discovery register --", tmp_path)
    # A value that names a file is completed with files.
    (tmp_path / "tokens.txt").write_text("t\n")
    offered = fish_complete(f"idmint serve --token-file {tmp_path}/tok", tmp_path)
    assert set(offered) == {f"{tmp_path}/tokens.txt"}
