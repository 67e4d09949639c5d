"""The `virtstream` command line."""

import sys

# the command line's own process (the `virtstream` script, or `python -m cli.main` while
# Python locates it): before anything imports nats or httpx (services/runtime/lean.py)
if sys.argv and (sys.argv[0] == "-m" or sys.argv[0].endswith("/virtstream")):
    from services.runtime import lean

    lean.skip_unused(keep=("rich", "pydantic"))  # typer converts parameters with pydantic
