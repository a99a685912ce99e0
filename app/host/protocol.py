"""What the parent and the engine host say to each other: one JSON object per line.

Commands (parent -> host, on the host's stdin), each {"cmd": NAME, ...}:
  run        load the pair if it is not loaded (`spec`), then decode `prompt` with `config`;
             `compare` adds the plain baseline; `step_mode` waits for `step` before each
             speculative step, `permits` steps are released already
  load       load the pair only
  job        load the pair if need be, then run the job named `job` (a name in
             app.host.jobs.JOBS; another name is refused with `error`) on it with its
             `settings` (its keyword arguments, JSON of app.host.wire); its progress messages
             come back as `work`
  step       release one step (Step mode)
  step_mode  `on`: pause before each speculative step, or not
  stop       end the run after the step in progress, or cancel the work after it (a `work`
             in progress) at its next check (a pass cannot be interrupted: the parent ends the
             host when a pass, or work that takes no cancel, outlasts its grace period)
  quit       close the models and exit

Events (host -> parent, on the host's stdout), each {"event": NAME, ...}:
  progress   `message` while loading (or timing the pair once loaded); where the step has a
             known size, also `done` of `total` and their `unit`, as `work` has them;
             `preparing`: true for the work before a run's first step, once the pair is
             loaded (a self-draft's choice of layers to skip: one per set it scores); `stop`
             ends that work at its next report; `transient`: true for a report the next
             one replaces (a set scored: the window shows it, a log leaves it out)
  loaded     `target`, `draft`, `backend`, `device`, `warnings`
  started    `run` (the trace mode: speculative or plain), `header`: the trace's header line,
             `t_target`: one plain target step in seconds if known (for a summary the parent
             writes when the run is cut off)
  step       `run`, `line`: the trace's step line, `text`: the new text it adds
  waiting    Step mode: the next step waits for `step`
  finished   `run`, `summary`: the trace's summary line
  work       what the host does after a run's steps (a compare's baseline, explaining a
             difference), or a job's progress: `task` (what it is, in words), `done` of
             `total` (total 0: no fraction known) and `unit`, what they count ("tokens";
             PERCENT: hundredths of the work; "" or absent: steps of it); each `work` replaces
             the one before, `done` ends it. `stop` cancels it at its next check (the
             baseline's next step, the kernel-noise measurement's next pass); work that
             outlasts the grace period silently is ended with the host, as a pass is
  compared   the speculative run against its plain baseline (Host._run in app.host.server);
             `explaining`: the texts differ and a later `compared` brings the explanation
  result     `result`: what a job returned, JSON of app.host.wire
  error      `message`: one line a user can act on
  done       the command has ended; the host waits for the next one

Step lines and header lines are the trace's own format (app.engine.trace), so a live run and
an opened trace are read by the same code.
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from typing import IO, Any

from app.analysis.divergence import Divergence
from app.engine.decode_config import DecodeConfig, choice_from_dict, choice_to_dict
from app.engine.sampling import SamplingParams
from app.models.loading import ModelSpec

# commands
RUN, LOAD, JOB, STEP, STEP_MODE, STOP, QUIT = (
    "run", "load", "job", "step", "step_mode", "stop", "quit")
# events
PROGRESS, LOADED, STARTED = "progress", "loaded", "started"
STEP_DONE, WAITING, FINISHED, COMPARED, RESULT, ERROR, DONE = (
    "step", "waiting", "finished", "compared", "result", "error", "done")
WORK = "work"
PERCENT = "%"  # a `unit` of progress: done and total are hundredths of the work


def write_line(stream: IO[str], message: dict[str, Any]) -> None:
    """One message, one line, flushed at once (the other end is waiting for it)."""
    stream.write(json.dumps(message, ensure_ascii=False, default=_plain) + "\n")
    stream.flush()


def _plain(value: Any) -> Any:
    """numpy scalars (a margin, a gap) as the Python numbers JSON knows."""
    item = getattr(value, "item", None)
    if item is None:
        raise TypeError(f"{type(value).__name__} is not JSON serialisable")
    return item()


def spec_to_dict(spec: ModelSpec) -> dict[str, Any]:
    return asdict(spec)


def spec_from_dict(data: dict[str, Any]) -> ModelSpec:
    return ModelSpec(**{**data, "self_skips": tuple(data.get("self_skips", ()))})


def config_to_dict(config: DecodeConfig) -> dict[str, Any]:
    return {**asdict(config), "drafter": choice_to_dict(config.drafter)}


def config_from_dict(data: dict[str, Any]) -> DecodeConfig:
    sampling = SamplingParams(**data["sampling"])
    drafter = choice_from_dict(data.get("drafter") or {})
    return DecodeConfig(**{**data, "sampling": sampling, "drafter": drafter})


def divergence_from_dict(data: dict[str, Any] | None) -> Divergence | None:
    if data is None:
        return None
    known = {f.name for f in fields(Divergence)}
    return Divergence(**{k: v for k, v in data.items() if k in known})

