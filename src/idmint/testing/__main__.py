"""``python -m idmint.testing URL``: run the claims contract against a coordinator.

One line per check as it ends (``passed``, ``FAILED`` with what broke, or
``skipped`` with why), then the closing count. Exit status: 0 when no check
failed, 1 when one did, 2 for a bad URL or usage, 69 when the coordinator
cannot be reached at all.
"""

from __future__ import annotations

import argparse
import logging
import sys

from idmint.coordinate import CoordinatorUrl, connect
from idmint.errors import ConfigurationError, CoordinationError, CoordinatorUnavailable
from idmint.testing import CHECKS, Outcome, hooks_for, run
from idmint.testing.checks import by_name

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 69


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m idmint.testing",
        description="Run the claims contract against a coordinator URL, in pools of its "
        "own inside the URL's, releasing and removing what it made.",
    )
    parser.add_argument("url", nargs="?", help="the coordinator URL, e.g. zk://host:2181/idmint")
    parser.add_argument(
        "--check", action="append", default=[], metavar="NAME", help="run only this check"
    )
    parser.add_argument("--list", action="store_true", help="list the checks and exit")
    parser.add_argument("--verbose", action="store_true", help="print each failure's traceback")
    args = parser.parse_args(argv)
    if args.list:
        for found in CHECKS:
            print(f"{found.name}: {found.doc}")
        return 0
    if args.url is None:
        parser.error("give the coordinator URL to check")
    # Claims lost and made again are what the checks provoke, and libraries (kazoo)
    # log their retries: log lines only with --verbose, the report's lines always.
    if args.verbose:
        logging.basicConfig(level=logging.INFO, format="idmint.testing: log: %(message)s")
    elif not logging.getLogger().handlers:
        logging.getLogger().addHandler(logging.NullHandler())
    try:
        url = CoordinatorUrl.parse(args.url)
        checks = by_name(args.check) if args.check else CHECKS
        hooks = hooks_for(url)
        with connect(url) as coordinator:
            coordinator.list_claims()  # a bad option or an unreachable server, said once
    except ConfigurationError as error:
        print(f"idmint.testing: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except CoordinatorUnavailable as error:
        print(f"idmint.testing: error: {error}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except CoordinationError as error:
        print(f"idmint.testing: error: {error}", file=sys.stderr)
        return EXIT_FAILED
    print(f"checking {url.redacted()} with {type(hooks).__name__}", flush=True)

    def show(outcome: Outcome) -> None:
        print(outcome.line(), flush=True)
        if args.verbose and outcome.trace:
            print(outcome.trace, end="", flush=True)

    report = run(url, hooks, checks, progress=show)
    print(report.summary())
    return 0 if report.ok else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
