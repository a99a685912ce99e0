"""The child side of app.models.preflight: load a GGUF with llama.cpp, tokenize a sample,
decode once.

Run as `python -m backends.llamacpp_preflight PATH`. Prints "stage: NAME" lines on stdout
(flushed) so the parent can tell where a crash happened. Exit status: 0 all went well;
2 llama.cpp reported an error (a line "preflight-error: ..." on stderr); 3 llama-cpp-python is
not installed; 64 bad usage. A native crash kills the process by a signal, which is what the
parent is there for.
"""

from __future__ import annotations

import sys

# Exercises byte fallback (the accent and the check mark) as well as plain code tokens.
SAMPLE = 'def hello():\n    return "héllo ✓"\n'
N_CTX = 64
EXIT_OK, EXIT_ERROR, EXIT_NO_RUNTIME, EXIT_USAGE = 0, 2, 3, 64


def _stage(name: str) -> None:
    print(f"stage: {name}", flush=True)


def _fail(message: str, code: int = EXIT_ERROR) -> int:
    print(f"preflight-error: {' '.join(message.split())}", file=sys.stderr, flush=True)
    return code


def main(argv: list[str] | None = None) -> int:
    """Run the preflight on one file; returns the exit status."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m backends.llamacpp_preflight MODEL.gguf", file=sys.stderr)
        return EXIT_USAGE
    path = args[0]
    _stage("import")
    try:
        import llama_cpp
        import numpy as np
    except ImportError as exc:
        return _fail(f"{exc}", EXIT_NO_RUNTIME)
    try:
        _stage("load")
        llm = llama_cpp.Llama(
            model_path=path,
            n_ctx=N_CTX,
            n_batch=N_CTX,
            n_threads=1,
            n_threads_batch=1,
            n_gpu_layers=0,
            verbose=True,  # llama.cpp's own log lines go to stderr: the parent quotes them
        )
        _stage("tokenize")
        n_vocab = llm.n_vocab()
        tokens = llm.tokenize(SAMPLE.encode("utf-8"), add_bos=True, special=False)
        if not tokens:
            return _fail("tokenizing a sample gave no tokens")
        bad = [t for t in tokens if not 0 <= t < n_vocab]
        if bad:
            return _fail(f"tokenizer returned id {bad[0]} outside the vocabulary of {n_vocab}")
        llm.detokenize(tokens)
        _stage("decode")
        llm.eval(tokens[: N_CTX // 2])
        logits = np.ctypeslib.as_array(
            llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(n_vocab,)
        )
        if not np.isfinite(logits).all():
            return _fail("the first decode produced NaN or infinite logits")
        _stage("done")
        llm.close()
    except Exception as exc:  # llama-cpp-python turns load and decode failures into these
        return _fail(f"{type(exc).__name__}: {exc}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
