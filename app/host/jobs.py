"""The window's analyses as jobs the engine host can run on the loaded pair. A job crosses to
the host as its name in JOBS and its settings (keyword arguments, JSON of app.host.wire), and
runs there as `JOBS[name](pair, cancelled, progress, **settings)`; the host runs no other."""

from __future__ import annotations

from collections.abc import Callable

from app.analysis.exact_report import ExactReport
from app.analysis.exactness import check_exact
from app.analysis.rank import Candidate, RankRow, rank_candidates
from app.analysis.sweep import SweepRow, run_sweep
from app.engine.decode_config import DecodeConfig, DrafterChoice
from app.models.loading import LoadedPair
from app.runs import encode_prompt

Cancelled = Callable[[], bool]
Progress = Callable[[str], None]


def sweep_job(pair: LoadedPair, cancelled: Cancelled, progress: Progress, *,
              config: DecodeConfig, prompt: str, chat: bool, ks: list[int]) -> list[SweepRow]:
    ids = encode_prompt(pair.target, prompt, chat)
    return run_sweep(pair, config, [ids], ks, 1, progress, cancelled)


def rank_job(pair: LoadedPair, cancelled: Cancelled, progress: Progress, *,
             candidates: list[Candidate], config: DecodeConfig, prompt: str,
             chat: bool) -> list[RankRow]:
    ids = encode_prompt(pair.target, prompt, chat)
    return rank_candidates(pair, candidates, config, [ids], 1, progress, cancelled)


def exactness_job(pair: LoadedPair, cancelled: Cancelled, progress: Progress, *,
                  samples: int, choice: DrafterChoice) -> ExactReport:
    return check_exact(pair, choice, samples=samples, progress=progress, cancelled=cancelled)


JOBS: dict[str, Callable[..., object]] = {
    "sweep": sweep_job, "rank": rank_job, "exactness": exactness_job}
