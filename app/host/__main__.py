"""`python -m app.host`: the engine host's child process (see app.host.server)."""

import sys

from app.host.server import main

if __name__ == "__main__":
    sys.exit(main())
