"""The engine: drafting, verifying, sessions, metrics and traces. Knows nothing of
runtimes (backends) or of the window; a loaded model is anything that satisfies
app.engine.protocol.LanguageModel."""
