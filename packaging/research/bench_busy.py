"""Decoding on busy cores: which lever keeps llama.cpp decoding at a sane rate when more
threads want to run than the machine has cores (a benchmark, not a test).

Levers, each a "config" NAME/THREADS[/poolPOLL]:
  NAME     the OpenMP wait policy the engine process starts with (read once, when llama.cpp's
           libgomp loads): default (unset: spin ~300k iterations, then sleep), passive
           (OMP_WAIT_POLICY=passive: sleep at once), spinN (GOMP_SPINCOUNT=N);
  THREADS  the threads each decode uses (llama_set_n_threads, switched between runs);
  poolP    a ggml threadpool attached with polling level P (0-100; llama-bench's default 50).
  auto     the engine's own choice (no pinned threads: backends.llamacpp_threads decides).

One worker process per wait policy loads the demo pair once; every round runs each workload
under each config, the order rotated round by round, so the levers see the same load and are
compared as ratios to `default/2` (what the engine did before). With --load suite the issue's
load runs beside them the whole time (two test files of the suite, restarted as they end);
--load burn runs two busy Python loops instead; --load none adds nothing (the load of the
machine is printed either way, `uptime`'s 1-minute figure, before each measurement).
--realtime (Linux, root) times the passes and runs with every thread of the worker in the
real-time class (SCHED_FIFO), ahead of everything else on the machine: a quiet machine as far
as the engine can tell, where no quiet moment comes (nice -20 was not: on the shared machine
default/2 passes still took 0.8-9.5 s at nice -20).

Modes: `runs` times `draftlens run -n 96`'s decoding (the pair loaded; prefill included) with
the default draft model at k = 3 and with --adaptive, and --ngram on a prompt that repeats
itself; a run longer than --cap seconds is stopped and its time for 96 tokens extrapolated
(marked >). `passes` times single target passes of 1 and 5 tokens (median of --passes each).

  PYTHONPATH=. .venv/bin/python packaging/research/bench_busy.py runs --load suite \\
      [--rounds 2] [--cap 120] [--configs default/2,default/1,passive/2,spin10000/2]
  PYTHONPATH=. .venv/bin/python packaging/research/bench_busy.py passes --load suite

--traces DIR (runs) writes each run's trace there, so the steps say which pass timings the
cost curve refused as stalled (`timing`), which were taken busy (`busy`) and the thread
switches (`threads`): docs/trace-format.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SUITE = ("tests/test_greedy_matches_plain.py", "tests/test_suffix_decoding.py")
CODE_PROMPT = "def quicksort(items):\n    \"\"\"Sort a list of numbers.\"\"\"\n"
_BLOCK = ("def area(shape, size):\n    if shape == 'square':\n        return size * size\n"
          "    if shape == 'circle':\n        return 3.14159 * size * size\n    return 0\n\n")
REPEAT_PROMPT = f"{_BLOCK}# the same function again, unchanged:\n{_BLOCK}# and once more:\n"
WORKLOADS = {  # name: `draftlens run` arguments
    "draft k=3": ["-n", "96", "--draft-max", "3", "-p", CODE_PROMPT],
    "draft adaptive": ["-n", "96", "--adaptive", "-p", CODE_PROMPT],
    "ngram": ["-n", "96", "--ngram", "-p", REPEAT_PROMPT],
}
POLICIES = {"default": {}, "passive": {"OMP_WAIT_POLICY": "passive"}}
OMP_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def log(message: str) -> None:
    print(f"[bench-busy] {message}", file=sys.stderr, flush=True)


def load_now() -> float:
    return os.getloadavg()[0]


@dataclass(frozen=True)
class Config:
    policy: str
    threads: int | None  # None: the engine decides (auto)
    poll: int | None = None

    @classmethod
    def parse(cls, text: str) -> Config:
        if text == "auto":
            return cls("engine", None)
        parts = text.split("/")
        poll = int(parts[2].removeprefix("pool")) if len(parts) > 2 else None
        return cls(parts[0], int(parts[1]), poll)

    def __str__(self) -> str:
        if self.threads is None:
            return "auto"
        return f"{self.policy}/{self.threads}" + ("" if self.poll is None else
                                                 f"/pool{self.poll}")


def policy_env(policy: str) -> dict[str, str]:
    """The worker's environment for a wait policy: the OpenMP variables this process has are
    dropped first, so `default` is libgomp's own default. `engine`: what the engine host
    starts with (app.host.client): the short spin, and huge pages."""
    env = {k: v for k, v in os.environ.items() if k not in OMP_VARIABLES}
    if policy == "engine":
        from app.host.client import engine_start_env

        return {**env, **engine_start_env(env)}
    if policy.startswith("spin"):
        return {**env, "GOMP_SPINCOUNT": policy.removeprefix("spin")}
    return {**env, **POLICIES[policy]}


# -- the worker: one process per wait policy, the pair loaded once --


def worker() -> int:
    from app.cli.main import build_parser
    from app.cli.options import settings
    from app.engine.cost_curve import VerifyCostCurve
    from app.models.loading import load_pair

    parser = build_parser()
    _config, spec = settings(parser.parse_args(["run", *WORKLOADS["draft k=3"]]))
    pair = load_pair(spec)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        order = json.loads(line)
        config = Config.parse(order["config"])
        models = [m for m in (pair.target, pair.draft) if m is not None]
        for model in models:
            model.use_threadpool(False)
            if config.poll is not None:
                model.use_threadpool(True, poll=config.poll)
            model.threads_auto = config.threads is None  # else pinned: the engine keeps them
        pair.target.limit_threads(config.threads)
        if order["mode"] == "passes":
            reply: dict[str, Any] = time_passes(pair.target, order["passes"],
                                                order["realtime"])
        else:
            args = parser.parse_args(["run", *WORKLOADS[order["workload"]]])
            pair.verify_curve = None  # each run starts from the stored curve, as a run does
            reply = time_run(pair, settings(args)[0], args.prompt, order["cap"],
                             order["realtime"], order.get("trace"))
            pair.verify_curve = VerifyCostCurve()
        print(json.dumps(reply), flush=True)
    return 0


def time_run(pair: Any, config: Any, prompt: str, cap: float, realtime: bool,
             trace: str | None = None) -> dict[str, Any]:
    """One run's decoding, timed; with `trace`, its JSONL trace (each step's `timing`, `busy`
    and `threads`, as `draftlens run --trace` writes them) is written there as it runs."""
    from app.engine.trace import TraceWriter
    from app.runs import finish_trace, prepare_run

    run = prepare_run(pair, config, prompt, chat=False)
    writer = TraceWriter(trace) if trace else None
    if writer is not None:
        writer.header(run.header)
    pair.target.extend(run.prompt_ids[:1], 1)  # OpenMP's threads exist from here on
    pair.target.truncate(0)
    if realtime:
        schedule_all_threads(os.SCHED_FIFO, 1)
    start = time.perf_counter()
    steps = changes = busy = 0
    threads: set[int] = set()
    try:
        for step in run.session.steps(run.prompt_ids):
            if writer is not None:
                writer.step(step)
            steps += 1
            busy += step.busy
            if step.threads is not None:
                changes += 1
                threads.add(step.threads.threads)
            if time.perf_counter() - start > cap:
                break
    finally:
        if realtime:
            schedule_all_threads(os.SCHED_OTHER, 0)
    seconds = time.perf_counter() - start
    if writer is not None:
        finish_trace(writer, run.session, interrupted=seconds > cap)
        writer.close()
    tokens = len(run.session.output_ids)
    return {"seconds": seconds, "tokens": tokens, "steps": steps,
            "refused": run.session.controller.curve.refused, "thread_changes": changes,
            "busy_steps": busy,
            "threads_used": sorted(threads)}


def time_passes(model: Any, passes: int, realtime: bool) -> dict[str, Any]:
    ids = model.tokenize(_BLOCK * 2)[:48]
    model.truncate(0)
    model.extend(ids, 0)
    medians, shares = {}, {}
    for n in (1, 5):
        model.extend(ids[:n], n)  # warm-up (and OpenMP's threads exist from here on)
        model.truncate(len(ids))
        threads = model.threads_now
        times, cpu = [], []
        if realtime:
            schedule_all_threads(os.SCHED_FIFO, 1)
        try:
            for _ in range(passes):
                start, start_cpu = time.perf_counter(), time.process_time()
                model.extend(ids[:n], n)
                times.append(time.perf_counter() - start)
                cpu.append(time.process_time() - start_cpu)
                model.truncate(len(ids))
        finally:
            if realtime:
                schedule_all_threads(os.SCHED_OTHER, 0)
        medians[str(n)] = statistics.median(times)
        shares[str(n)] = sum(cpu) / (sum(times) * threads)  # of the cores it asked for
    model.truncate(0)
    return {"medians": medians, "shares": shares}


def schedule_all_threads(policy: int, priority: int) -> None:
    for tid in os.listdir("/proc/self/task"):
        os.sched_setscheduler(int(tid), policy, os.sched_param(priority))


class Worker:
    def __init__(self, policy: str) -> None:
        env = {**policy_env(policy), "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
        command = [sys.executable, __file__, "worker"]
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env, cwd=ROOT)
        self.ask_line()  # ready

    def ask_line(self, order: dict[str, Any] | None = None) -> dict[str, Any]:
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None and stdout is not None
        if order is not None:
            stdin.write(json.dumps(order) + "\n")
            stdin.flush()
        line = stdout.readline()
        if not line:
            raise RuntimeError("a worker ended early (its stderr is above)")
        return dict(json.loads(line))

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


# -- the load beside the timed work --


class Load:
    """The suite (or two busy loops) in its own process group, restarted as it ends."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self.sink: IO[bytes] = open(os.devnull, "wb")  # noqa: SIM115 - closed in stop()

    def command(self) -> list[str]:
        if self.kind == "suite":
            return [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                    *SUITE]
        loop = "import multiprocessing as m\ndef f():\n    while True: pass\n" \
               "ps=[m.Process(target=f) for _ in range(2)]\n[p.start() for p in ps]\n" \
               "[p.join() for p in ps]"
        return [sys.executable, "-c", loop]

    def keep_running(self) -> None:
        if self.kind == "none" or (self.proc is not None and self.proc.poll() is None):
            return
        if self.proc is not None:
            self.restarts += 1
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1",
               "QT_QPA_PLATFORM": "offscreen"}
        self.proc = subprocess.Popen(self.command(), cwd=ROOT, env=env, stdout=self.sink,
                                     stderr=self.sink, start_new_session=True)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)
        self.sink.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["runs", "passes", "worker"])
    parser.add_argument("--load", choices=["suite", "burn", "none"], default="suite")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cap", type=float, default=120.0)
    parser.add_argument("--passes", type=int, default=9)
    parser.add_argument("--realtime", action="store_true")
    parser.add_argument("--configs", default="default/2,default/1,passive/2,spin10000/2")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--json", default="")
    parser.add_argument("--traces", default="",
                        help="runs: write each run's JSONL trace into this folder")
    args = parser.parse_args()
    if args.mode == "worker":
        return worker()
    configs = [Config.parse(c) for c in args.configs.split(",")]
    workloads = args.workloads.split(",") if args.mode == "runs" else ["passes"]
    log(f"start: load {load_now():.1f} on {os.cpu_count()} cores")
    workers = {c.policy: None for c in configs}
    load = Load(args.load)
    results: list[dict[str, Any]] = []
    try:
        for policy in workers:
            workers[policy] = Worker(policy)
        load.keep_running()
        time.sleep(0 if args.load == "none" else 20)  # the load's own start-up
        for r in range(args.rounds):
            for workload in workloads:
                turn = configs[r % len(configs):] + configs[: r % len(configs)]
                for config in turn:
                    load.keep_running()
                    before = load_now()
                    order = {"config": str(config), "mode": args.mode, "workload": workload,
                             "cap": args.cap, "passes": args.passes,
                             "realtime": args.realtime,
                             "trace": trace_path(args.traces, r, workload, config)}
                    w = workers[config.policy]
                    assert w is not None
                    reply = w.ask_line(order)
                    row = {"round": r, "workload": workload, "config": str(config),
                           "load_before": before, "load_after": load_now(), **reply}
                    results.append(row)
                    log(json.dumps(row))
    finally:
        load.stop()
        for w in workers.values():
            if w is not None:
                w.close()
    report(results, configs, workloads, args)
    return 0


def trace_path(folder: str, round_index: int, workload: str, config: Config) -> str | None:
    if not folder:
        return None
    name = f"{workload}-{config}-round{round_index + 1}".replace("/", "_").replace(" ", "_")
    return str(Path(folder) / f"{name}.jsonl")


def report(results: list[dict[str, Any]], configs: list[Config], workloads: list[str],
           args: argparse.Namespace) -> None:
    loads = [x["load_before"] for x in results] + [x["load_after"] for x in results]
    realtime = "real-time class, " if args.realtime else ""
    print(f"mode {args.mode}, load beside it: {args.load} (suite restarts counted in the log), "
          f"{realtime}{args.rounds} rounds; machine load {min(loads):.1f}-{max(loads):.1f} "
          f"(1-min average) on {os.cpu_count()} cores")
    base = str(configs[0])
    for workload in workloads:
        print(f"\n{workload}")
        rows = [x for x in results if x["workload"] == workload]
        for config in map(str, configs):
            mine = [x for x in rows if x["config"] == config]
            if args.mode == "passes":
                for n in ("1", "5"):
                    times = [x["medians"][n] for x in mine]
                    ratios = [x["medians"][n] / y["medians"][n] for x, y in _pairs(rows, config,
                                                                                  base)]
                    share = statistics.median(x["shares"][n] for x in mine)
                    print(f"  {config:18} {n}-token pass {statistics.median(times) * 1e3:8.1f} ms"
                          f"   x {base}: {_spread(ratios)}   share of its cores {share:.2f}")
                continue
            times = [_seconds_for_96(x) for x in mine]
            capped = any(x["tokens"] < 96 for x in mine)
            ratios = [_seconds_for_96(x) / _seconds_for_96(y)
                      for x, y in _pairs(rows, config, base)]
            extra = (f" refused {sum(x['refused'] for x in mine)}, thread changes "
                     f"{sum(x['thread_changes'] for x in mine)}")
            print(f"  {config:18} {'>' if capped else ' '}{statistics.median(times):7.1f} s "
                  f"per 96 tokens (rounds {', '.join(f'{t:.1f}' for t in times)})   "
                  f"x {base}: {_spread(ratios)};{extra}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


def _seconds_for_96(row: dict[str, Any]) -> float:
    return float(row["seconds"]) * 96 / max(1, int(row["tokens"]))


def _pairs(rows: list[dict[str, Any]], config: str, base: str
           ) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each round's row of `config` with the same round's row of `base`."""
    by_round = {(x["round"], x["config"]): x for x in rows}
    return [(by_round[(r, config)], by_round[(r, base)])
            for r in sorted({x["round"] for x in rows})
            if (r, config) in by_round and (r, base) in by_round]


def _spread(ratios: list[float]) -> str:
    if not ratios:
        return "-"
    return f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})"


if __name__ == "__main__":
    raise SystemExit(main())
