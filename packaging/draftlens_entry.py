"""Entry point of the packaged (PyInstaller) app: the same `draftlens` as the pip install.

`draftlens` with no arguments opens the window; `draftlens run|bench|models|trace ...` work as in
the pip install, and the hidden `--preflight-child PATH` is how the app checks a model file in a
child process when there is no `python -m` (see app/models/preflight.py); the hidden
`--engine-host` starts the engine host, the child process that decodes for the window and
`draftlens run` (app/host/).
"""

import sys

from ui.launcher import main

if __name__ == "__main__":
    sys.exit(main())
