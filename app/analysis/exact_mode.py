"""The greedy suite in the exact mode, in a child process, and the check of the batched path.

llama.cpp chooses its CPU kernels once per process, so the exact (batch-invariant) run of a
pair loaded with the fast kernels needs a process of its own: `draftlens check-exact
--greedy-only --exact-kernels --json` on the same files and decode settings. Those kernels
are CPU settings (`use_extra_bufts`, the tiled matmul, flash attention off): with GPU layers
or an RPC target the child would not be batch-invariant, so it runs on the CPU (-ngl 0, no
RPC) and the report says so. torch has no batch-invariant kernels (a pass's rows differ from
single steps in the last bits, in float32 on a CPU as on CUDA): its exact mode runs every
pass one token at a time (backends.torch_hf), on any device.

One token per pass never runs the batched code a user's run does (a tree mask, positions by
depth, keep_path), so the child also measures that code against single steps where the
arithmetic leaves no room for doubt: llama.cpp's exact kernels must give chain passes, a
tree's first path and the row after keeping a path bit-identical to single steps; torch
loads the target again in float64, batched, where rounding moves a gap by ~1e-12, and its
chain and tree passes must stay within 1e-6. llama.cpp's tree rows off the first path see
the cache with other branches' cells between theirs, so even the exact kernels sum them in
another order (0.32 logits on the demo target; 2e-6 on the tiny test model): they are held
to the limit the fast kernels' chain rows are held to (noise_ceiling), and what they
measure is the greedy tie guard's bound there (a row nearer a tie is not trusted).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.analysis.kernel_noise import CEILINGS, measure_kernel_noise, noise_ceiling
from app.engine.decode_config import DecodeConfig, DrafterChoice, SuffixOptions
from app.errors import DraftLensError
from app.models.loading import LoadedPair, ModelSpec

# positions per window for the exact child's batched-path check: a bug in the batched path
# moves every row, so a short stretch shows it (the noise bound needs more, see kernel_noise)
CHECK_POSITIONS = 24
CHECK_SIZES = (2, 5, 9, 17)
IN_PROCESS = "DRAFTLENS_IN_PROCESS"  # app.cli.supervisor.IN_PROCESS, a floor above this one
CANCEL_POLL_S = 0.1  # well inside the window's grace period before it kills a silent host


def exact_mode_name(spec: ModelSpec) -> str:
    if spec.resolved_backend() == "llamacpp":
        return "exact kernels on the CPU"
    return "torch, one token per pass"


def has_exact_mode(backend: str) -> bool:
    return backend in ("llamacpp", "torch")


def spec_flags(spec: ModelSpec, choice: DrafterChoice) -> list[str]:
    """The command-line flags that load `spec`'s pair again, in the exact mode (llama.cpp:
    on the CPU, where its batch-invariant kernels hold), and draft as `choice` says."""
    on_cpu = spec.resolved_backend() == "llamacpp"
    flags = ["-m", spec.target, "--backend", spec.resolved_backend(),
             "--device", "cpu" if on_cpu else spec.device,
             "-ngl", "0" if on_cpu else str(spec.n_gpu_layers), "-c", str(spec.n_ctx),
             "--exact-kernels", "--spec-type", ",".join(choice.names)]
    if spec.draft:
        flags += ["-md", spec.draft]
    options = choice.options
    if options.cross_vocab != "auto":
        flags += ["--cross-vocab", options.cross_vocab]
    if choice.uses("self"):
        flags += ["--self-skip", options.skip or "auto", "--self-cost", str(options.skip_cost),
                  "--self-head", str(spec.self_head)]
    if options.heads:
        flags += ["--draft-heads", options.heads]
    if options.memory:
        flags += ["--draft-memory", options.memory]
    if options.suffix != SuffixOptions():
        reach = options.suffix
        flags += ["--spec-factor", repr(reach.factor), "--spec-offset", repr(reach.offset),
                  "--spec-min-prob", repr(reach.min_prob)]
    if spec.n_threads:
        flags += ["-t", str(spec.n_threads)]
    if spec.rpc and not on_cpu:
        flags += ["--rpc", spec.rpc]
    if spec.mmap is not None:
        flags.append("--mmap" if spec.mmap else "--no-mmap")
    if spec.trust_remote_code:
        flags.append("--trust-remote-code")
    if spec.allow_pickle:
        flags.append("--allow-pickle")
    return flags


def decode_flags(config: DecodeConfig) -> list[str]:
    """The decode settings the greedy suite uses, as `run`'s flags (sampling aside)."""
    flags = ["-n", str(config.n_predict), "--draft-max", str(config.draft_max),
             "--draft-min", str(config.draft_min), "--tree-width", str(config.tree_width),
             "--tree-nodes", str(config.tree_nodes), "--draft-p-split",
             repr(config.draft_p_split)]
    if config.draft_p_min:
        flags += ["--draft-p-min", repr(config.draft_p_min)]
    if config.adaptive:
        flags.append("--adaptive")
    return flags


def child_command(spec: ModelSpec, config: DecodeConfig,
                  prompts: Sequence[str] = ()) -> list[str]:
    """A packaged (frozen) app has no `python -m`: it runs its own executable. `prompts`:
    the greedy suite's, where they are not its own."""
    program = [sys.executable] if getattr(sys, "frozen", False) else [
        sys.executable, "-m", "app.cli.main"]
    return [*program, "check-exact", "--greedy-only", "--json", *decode_flags(config),
            *spec_flags(spec, config.drafter), *(f"--prompt={p}" for p in prompts)]


class CheckCancelled(DraftLensError):
    """`cancelled()` said stop while the exact-mode child ran: the child was ended."""


def run_exact_mode(spec: ModelSpec, config: DecodeConfig,
                   cancelled: Callable[[], bool] | None = None,
                   prompts: Sequence[str] = ()) -> dict[str, object]:
    """The child's greedy suite (GreedySuite.to_dict()). `cancelled()` is asked every
    CANCEL_POLL_S while it runs; True ends the child and raises CheckCancelled. However this
    ends (an exception, Ctrl+C) the child does not outlive the call; and it stays in this
    process's process group, so whoever kills that group (the window's Stop on a host that
    does not answer, a second Ctrl+C) ends it too (app.host.client.end_process_group)."""
    command = child_command(spec, config, prompts)
    # in the process started here, not in a supervised one of its own (app.cli.supervisor
    # starts the engine in a new session, out of reach of whoever ends this process's group);
    # this process reports how the child ended
    env = dict(os.environ, **{IN_PROCESS: "1"})
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env) as child:
        try:
            out, err = _wait(child, cancelled)
        finally:
            if child.poll() is None:
                child.kill()
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if child.returncode not in (0, 3) or not lines:
        said = [line for line in err.splitlines() if line.strip()]
        raise DraftLensError(
            f"the exact-mode run of check-exact (a child process) ended with exit code "
            f"{child.returncode}: {said[-1] if said else 'no message'} — run it yourself to "
            f"see all of it: {' '.join(command[1:])}")
    suite = json.loads(lines[-1])["greedy_suite"]
    if not isinstance(suite, dict):
        raise DraftLensError("the exact-mode run of check-exact printed no greedy suite")
    return suite


def _wait(child: subprocess.Popen[str], cancelled: Callable[[], bool] | None,
          ) -> tuple[str, str]:
    """The child's stdout and stderr once it has ended."""
    while True:
        try:
            return child.communicate(timeout=None if cancelled is None else CANCEL_POLL_S)
        except subprocess.TimeoutExpired:  # output read so far is kept for the next call
            if cancelled is not None and cancelled():
                raise CheckCancelled("check-exact was cancelled (its exact-mode child process "
                                     "was ended)") from None


@dataclass
class BatchedCheck:
    """The batched path of an exact-mode pair against single steps, on two kinds of row
    (KernelNoise.chain_bound and tree_bound)."""
    what: str  # what was measured
    bound: float  # the largest top-two gap moved on chain rows (and rows marked exact)
    ceiling: float  # the most the arithmetic allows there
    tree_bound: float  # on the other tree rows (the greedy tie guard's bound)
    tree_ceiling: float  # the most the arithmetic allows there


def batched_path_check(pair: LoadedPair) -> BatchedCheck | None:
    """None where the backend has no such check."""
    target, spec = pair.target, pair.spec
    if target.backend == "llamacpp":
        noise = measure_kernel_noise(target, CHECK_POSITIONS, CHECK_SIZES)
        return BatchedCheck("llama.cpp's exact kernels (chain passes, tree passes, keep_path)",
                            noise.chain_bound, 0.0, noise.tree_bound, noise_ceiling(target))
    if target.backend != "torch":
        return None
    from backends.torch_hf import TorchModel

    twin = TorchModel(spec.target, device=spec.device, trust_remote_code=spec.trust_remote_code,
                      allow_pickle=spec.allow_pickle, dtype="float64")
    try:
        noise = measure_kernel_noise(twin, CHECK_POSITIONS, CHECK_SIZES)
    finally:
        twin.close()
    return BatchedCheck("torch float64 (batched chain and tree passes, keep_path)",
                        noise.chain_bound, CEILINGS["float64"], noise.tree_bound,
                        CEILINGS["float64"])
