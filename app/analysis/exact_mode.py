"""The greedy suite with batch-invariant kernels, in a child process.

llama.cpp chooses its CPU kernels once per process, so the exact (batch-invariant) run of a
pair loaded with the fast kernels needs a process of its own: `draftlens check-exact
--greedy-only --exact-kernels --json` on the same files. torch has no batch-invariant kernels
(a pass's rows differ from single steps in the last bits, in float32 on a CPU as on CUDA): its
exact mode runs every pass one token at a time (backends.torch_hf), on any device.
"""

from __future__ import annotations

import json
import subprocess
import sys

from app.engine.registry import DrafterChoice
from app.errors import DraftLensError
from app.models.loading import ModelSpec


def exact_mode_name(backend: str) -> str:
    return "exact kernels" if backend == "llamacpp" else "torch, one token per pass"


def has_exact_mode(backend: str) -> bool:
    return backend in ("llamacpp", "torch")


def spec_flags(spec: ModelSpec, choice: DrafterChoice) -> list[str]:
    """The command-line flags that load `spec`'s pair again, with the exact kernels, and
    draft as `choice` says."""
    flags = ["-m", spec.target, "--backend", spec.resolved_backend(), "--device", spec.device,
             "-ngl", str(spec.n_gpu_layers), "-c", str(spec.n_ctx), "--exact-kernels",
             "--spec-type", ",".join(choice.names)]
    if spec.draft:
        flags += ["-md", spec.draft]
    options = choice.options
    if options.cross_vocab != "auto":
        flags += ["--cross-vocab", options.cross_vocab]
    if options.layers:
        flags += ["--self-draft-layers", str(options.layers)]
    if options.heads:
        flags += ["--draft-heads", options.heads]
    if options.memory:
        flags += ["--draft-memory", options.memory]
    if spec.n_threads:
        flags += ["-t", str(spec.n_threads)]
    if spec.rpc:
        flags += ["--rpc", spec.rpc]
    if spec.trust_remote_code:
        flags.append("--trust-remote-code")
    if spec.allow_pickle:
        flags.append("--allow-pickle")
    return flags


def child_command(spec: ModelSpec, choice: DrafterChoice, draft_max: int,
                  n_predict: int) -> list[str]:
    """A packaged (frozen) app has no `python -m`: it runs its own executable."""
    program = [sys.executable] if getattr(sys, "frozen", False) else [
        sys.executable, "-m", "app.cli.main"]
    return [*program, "check-exact", "--greedy-only", "--json", "--draft-max", str(draft_max),
            "-n", str(n_predict), *spec_flags(spec, choice)]


def run_exact_mode(spec: ModelSpec, choice: DrafterChoice, draft_max: int,
                   n_predict: int) -> dict[str, object]:
    """The child's greedy suite (GreedySuite.to_dict())."""
    command = child_command(spec, choice, draft_max, n_predict)
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode not in (0, 3) or not lines:
        said = [line for line in done.stderr.splitlines() if line.strip()]
        raise DraftLensError(
            f"the exact-kernels run of check-exact (a child process) ended with exit code "
            f"{done.returncode}: {said[-1] if said else 'no message'} — run it yourself to see "
            f"all of it: {' '.join(command[1:])}")
    suite = json.loads(lines[-1])["greedy_suite"]
    if not isinstance(suite, dict):
        raise DraftLensError("the exact-kernels run of check-exact printed no greedy suite")
    return suite
