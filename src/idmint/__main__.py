"""``python -m idmint`` runs the CLI."""

from idmint.cli import main

raise SystemExit(main())
