"""How far the command line's values travel from `draftlens bench` to the session: the walk
from cmd_bench, traced on tiny models, as stops and returns.

A stop is the first call of a project function (a file under app/ or backends/) that receives a
settings value among its arguments (self included): the argparse namespace or a value built
from it (a Plan, DecodeConfig, DrafterChoice, DrafterOptions, SuffixOptions, SamplingParams,
StopRule, TreeShape or ModelSpec), directly or inside a list, tuple or dict argument. The walk
ends where the first Session with a drafter is built (--to-first: the first Session of all, the
warm-up's plain one). A return is a stop in a module the walk had already left. Classes are
matched by name, so the same script traces an older checkout (--repo).

    PYTHONPATH=. .venv/bin/python packaging/research/settings_walk.py [--to-first] [--repo DIR]
        [-- BENCH FLAGS...]   (default: a draft model; e.g. -- --self-draft-layers 1)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

SETTINGS = {"Namespace", "Plan", "DecodeConfig", "DrafterChoice", "DrafterOptions",
            "SuffixOptions", "SamplingParams", "StopRule", "TreeShape", "ModelSpec"}


def is_settings(value: Any, depth: int = 0) -> bool:
    if type(value).__name__ in SETTINGS:
        return True
    if depth < 2 and isinstance(value, (list, tuple)):
        return any(is_settings(item, depth + 1) for item in value[:8])
    if depth < 2 and isinstance(value, dict):
        return any(is_settings(item, depth + 1) for item in list(value.values())[:8])
    return False


def walk(repo: Path, flags: list[str], to_first: bool) -> list[tuple[str, str]]:
    """The stops, in order: (module file relative to the repository, function)."""
    sys.path.insert(0, str(repo))
    from tests.tiny_gguf import write_tiny_gguf

    folder = Path(tempfile.mkdtemp())
    target = write_tiny_gguf(folder / "t.gguf", seed=0)
    draft = write_tiny_gguf(folder / "d.gguf", seed=0, noise_from=target)
    from app.cli.bench import cmd_bench
    from app.cli.main import build_parser

    project = (str(repo / "app"), str(repo / "backends"))
    stops: list[tuple[str, str]] = []
    done = False

    def follow(frame: FrameType, event: str, arg: object) -> None:
        nonlocal done
        code = frame.f_code
        if done or event != "call" or not code.co_filename.startswith(project):
            return
        key = (os.path.relpath(code.co_filename, repo), code.co_qualname)
        if not stops and code.co_name != "cmd_bench":
            return
        names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        if stops and not any(is_settings(frame.f_locals.get(n)) for n in names):
            return
        if key not in stops:
            stops.append(key)
        if code.co_qualname == "Session.__init__" and (
                to_first or frame.f_locals.get("drafter") is not None):
            done = True

    drafts = [] if "--self-draft-layers" in flags else ["-md", str(draft)]
    args = build_parser().parse_args(["bench", "-m", str(target), *drafts, "-n", "8", "-p",
                                      "def f(x):", "--rounds", "1", *flags])
    sys.setprofile(follow)
    try:
        cmd_bench(args)
    finally:
        sys.setprofile(None)
    return stops


def returns(stops: list[tuple[str, str]]) -> int:
    left: set[str] = set()
    count, current = 0, None
    for module, _ in stops:
        if module != current:
            count += module in left
            if current is not None:
                left.add(current)
            current = module
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[2])
    parser.add_argument("--to-first", action="store_true",
                        help="end at the first Session built (the warm-up's plain one)")
    parser.add_argument("flags", nargs="*", help="more bench flags, after --")
    args = parser.parse_args(argv)
    repo = args.repo.resolve()
    os.chdir(repo)
    stops = walk(repo, args.flags, args.to_first)
    for module, function in stops:
        print(f"{module}: {function}")
    print(f"stops {len(stops)}, modules {len({m for m, _ in stops})}, returns {returns(stops)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
