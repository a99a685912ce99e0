"""Model files: checks before loading (GGUF metadata, a preflight child), the pair check,
discovery of models on disk, loading through a backend, and the demo pair download."""
