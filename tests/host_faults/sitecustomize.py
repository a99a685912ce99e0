"""Test-only: a fault planted in the engine host's llama.cpp backend, for tests/test_host.py.

The tests put this folder on the host's PYTHONPATH, so Python imports this module when the
host starts; outside those tests it is never on a path. With DRAFTLENS_TEST_FAULT set, the
target's verify pass after step DRAFTLENS_TEST_FAULT_AFTER (default 2) has been reported:
  abort  writes a llama.cpp-style assert line to stderr and calls os.abort() (SIGABRT)
  kill   SIGKILLs its own process, as the out-of-memory killer does
  sleep  sleeps DRAFTLENS_TEST_FAULT_SECONDS (default 60) inside the pass: a pass that
         cannot be interrupted, for Stop (first creating the file DRAFTLENS_TEST_FAULT_MARK
         names, if set)
  differ every pass that returns several rows (verify passes; the kernel-noise measurement's
         passes) swaps each row's two best logits, as tests/helpers.py's SwappingVerifier does,
         and then sleeps DRAFTLENS_TEST_FAULT_SECONDS (default 0): a greedy compare's texts
         differ, and explaining it measures the kernel noise for long enough to cancel it
With DRAFTLENS_TEST_FAULT_PASSES=N instead, the N-th verify pass of the process fails: for
the commands that report no steps (bench, sweep, rank, check-exact under app.cli.supervisor).
  memory limits the host's address space to what it uses plus 16 MiB just before it loads
         a model: a load over a memory limit
"""

import os

_FAULT = os.environ.get("DRAFTLENS_TEST_FAULT", "")

if _FAULT:
    import resource
    import signal
    import sys
    import time

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a planted abort leaves no core file

    from app.engine import trace
    from backends.llamacpp import LlamaCppModel

    _after = int(os.environ.get("DRAFTLENS_TEST_FAULT_AFTER", "2"))
    _reported = [0]
    _passes_before_fault = int(os.environ.get("DRAFTLENS_TEST_FAULT_PASSES", "0"))
    _passes = [0]
    _step_to_dict = trace.step_to_dict
    _extend = LlamaCppModel.extend

    def _counting_step_to_dict(step):  # the host reports each step through this
        _reported[0] += 1
        return _step_to_dict(step)

    def _faulty_extend(self, ids, n_logits, *args, **kwargs):
        if n_logits > 1:
            _passes[0] += 1
        due = (_passes[0] >= _passes_before_fault if _passes_before_fault
               else _reported[0] >= _after)
        if due and n_logits > 1:
            if _FAULT == "abort":
                sys.stderr.write("llama.cpp/ggml/src/ggml.c:1234: GGML_ASSERT(planted) failed\n")
                sys.stderr.flush()
                os.abort()
            elif _FAULT == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif _FAULT == "sleep":
                mark = os.environ.get("DRAFTLENS_TEST_FAULT_MARK")
                if mark:  # tells a test the pass has begun
                    open(mark, "w").close()
                time.sleep(float(os.environ.get("DRAFTLENS_TEST_FAULT_SECONDS", "60")))
        return _extend(self, ids, n_logits, *args, **kwargs)

    def _swapping_extend(self, ids, n_logits, *args, **kwargs):
        logits = _extend(self, ids, n_logits, *args, **kwargs)
        if n_logits > 1:
            import numpy as np

            logits = logits.copy()
            for row in logits:
                a, b = np.argsort(row)[-2:][::-1]
                row[a], row[b] = row[b], row[a]
            time.sleep(float(os.environ.get("DRAFTLENS_TEST_FAULT_SECONDS", "0")))
        return logits

    trace.step_to_dict = _counting_step_to_dict
    LlamaCppModel.extend = _swapping_extend if _FAULT == "differ" else _faulty_extend

    if _FAULT == "memory":
        from pathlib import Path

        _init = LlamaCppModel.__init__

        def _init_under_a_limit(self, *args, **kwargs):
            used = int(Path("/proc/self/statm").read_text().split()[0]) * resource.getpagesize()
            limit = used + 16 * 2**20
            resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
            _init(self, *args, **kwargs)

        LlamaCppModel.__init__ = _init_under_a_limit
