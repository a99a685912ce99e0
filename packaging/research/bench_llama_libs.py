"""Is plain decoding slower through llama-cpp-python's shared libraries than through a static
llama.cpp? `llama-bench` tg three ways, interleaved, the order rotated each round:

  static          the llama-bench packaging/build_llama_tools.sh builds (BUILD_SHARED_LIBS=OFF)
  shared          a llama-bench built with BUILD_SHARED_LIBS=ON (the same source and flags)
  shared + wheel  that binary loading the installed llama-cpp-python's own libraries
                  (LD_LIBRARY_PATH outranks its RUNPATH)

Build the shared one first (the same CMake flags as setup.sh, from the vendored source):

    cmake -S $TOOLS/llama_cpp_python-*/vendor/llama.cpp -B /tmp/llb-shared \\
        -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF \\
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF $(flags from packaging/lib/llama.sh)
    cmake --build /tmp/llb-shared -j 2 --target llama-bench
    .venv/bin/python packaging/research/bench_llama_libs.py --shared /tmp/llb-shared/bin
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_threadpool import llama_bench  # noqa: E402

from app.models.demo import demo_paths  # noqa: E402


def wheel_libs() -> Path:
    import llama_cpp

    return Path(llama_cpp.__file__).parent / "lib"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, required=True,
                        help="the bin folder of a BUILD_SHARED_LIBS=ON llama-bench")
    parser.add_argument("--tools", type=Path, default=Path(os.environ.get(
        "DRAFTLENS_LLAMA_TOOLS", ROOT / "packaging/.build/llama-tools")))
    parser.add_argument("-m", "--target", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--depth", type=int, default=256)
    parser.add_argument("-n", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    model = args.target or str(demo_paths()[0])
    sides = {"static": (args.tools / "bin", {}),
             "shared": (args.shared, {}),
             "shared + wheel": (args.shared, {"LD_LIBRARY_PATH": str(wheel_libs())})}
    names = list(sides)
    rates: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(args.rounds):
        for name in names[round_ % 3:] + names[: round_ % 3]:
            folder, env = sides[name]
            n, seconds = llama_bench(folder, model, args.threads, args.depth, args.n, env)
            rate = n / seconds
            rates[name].append(rate)
            print(f"round {round_ + 1} {name}: {rate:.2f} tok/s", flush=True)
    static = statistics.fmean(rates["static"])
    for name in names:
        per = [x / y for x, y in zip(rates[name], rates["static"], strict=True)]
        print(f"{name}: {statistics.fmean(rates[name]):.2f} tok/s, "
              f"{statistics.fmean(rates[name]) / static:.3f}× static "
              f"(rounds {min(per):.3f}–{max(per):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
