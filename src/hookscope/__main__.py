"""``python -m hookscope`` runs the command line."""

from hookscope.cli import main

raise SystemExit(main())
