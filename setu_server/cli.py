"""`python -m setu_server.cli`, the older spelling of `setu` (setu_cli/main.py),
which now owns every command; the server package adds only `dev`
(setu_server/dev.py)."""

from setu_cli.main import main

if __name__ == "__main__":
    main()
