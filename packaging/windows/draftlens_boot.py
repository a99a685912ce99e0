"""What draftlens.exe and draftlens-cli.exe run: `python -B -X utf8 -m draftlens_boot ARGS`.

The embeddable CPython runs the app as a packaged one, as PyInstaller does on Linux: sys.frozen
makes the app start its child processes (engine host, preflight, check-exact) as
`<this exe> --engine-host ...` rather than `python -m ...`, and llama.cpp's CPU variants
(ggml-cpu-*.dll in llama_cpp/lib) are loaded once llama_cpp is first imported, by the same hook
the PyInstaller bundle runs (packaging/hooks/rthook_ggml_backends.py, installed as
_draftlens_ggml_backends).
"""

import sys

import _draftlens_ggml_backends  # noqa: F401  (installs the import hook)

sys.frozen = True  # type: ignore[attr-defined]
sys.argv[0] = sys.executable

from ui.launcher import main  # noqa: E402

sys.exit(main())
