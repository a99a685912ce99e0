"""Put a GGML_BACKEND_DL build's CPU variants where llama-cpp-python's own libraries are.

    python packaging/fix_llama_wheel.py WHEEL     (rewrites the wheel in place; idempotent)

llama-cpp-python 0.3.36 installs llama, ggml and ggml-base into llama_cpp/lib, but with
GGML_CPU_ALL_VARIANTS the CPU backends are targets named ggml-cpu-<variant>, which only
llama.cpp's own install rules pick up: they land in the wheel's top-level bin/ (so in
site-packages/bin/ once installed, where nothing looks for them), next to top-level lib/ and
include/ copies of the other libraries and headers. This moves bin/[lib]ggml-*.{so,dll,dylib}
into llama_cpp/lib/, drops the other top-level bin/, lib/ and include/ entries, and rewrites
RECORD. The runtime hook (hooks/rthook_ggml_backends.py) then loads them from there.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import sys
import tempfile
import zipfile
from pathlib import Path

VARIANT = re.compile(r"^bin/((?:lib)?ggml-[\w.-]+\.(?:so|dll|dylib))$")
DROP = ("bin/", "lib/", "include/")


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode("ascii")


def fix(wheel: Path) -> list[str]:
    """Rewrite `wheel`; returns the names of the variant libraries moved (empty: nothing to do)."""
    with zipfile.ZipFile(wheel) as zin:
        infos = zin.infolist()
        names = [i.filename for i in infos]
        moved = [m.group(1) for n in names if (m := VARIANT.match(n))]
        if not moved and not any(n.startswith(DROP) for n in names):
            return []
        record_name = next(n for n in names if n.endswith(".dist-info/RECORD"))
        fd, tmp = tempfile.mkstemp(suffix=".whl", dir=wheel.parent)
        os.close(fd)
        record: list[str] = []
        try:
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
                for info in infos:
                    name = info.filename
                    if name == record_name:
                        continue
                    m = VARIANT.match(name)
                    if m:
                        name = f"llama_cpp/lib/{m.group(1)}"
                    elif name.startswith(DROP):
                        continue
                    data = zin.read(info)
                    out = zipfile.ZipInfo(name, date_time=info.date_time)
                    out.external_attr = info.external_attr
                    out.compress_type = zipfile.ZIP_DEFLATED
                    zout.writestr(out, data)
                    record.append(f"{name},{_record_hash(data)},{len(data)}")
                record.append(f"{record_name},,")
                zout.writestr(record_name, "\n".join(record) + "\n")
            os.chmod(tmp, 0o644)
            os.replace(tmp, wheel)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return moved


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    moved = fix(Path(argv[0]))
    if moved:
        print(f"fix_llama_wheel: moved {len(moved)} CPU variants into llama_cpp/lib: "
              + " ".join(sorted(moved)))
    else:
        print("fix_llama_wheel: nothing to move")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
