"""The engine host: a child process that owns the loaded model pair, so that a runtime that
ends its process (a GGML_ASSERT, a dead RPC server, a GPU out-of-memory kill) ends the host,
never the window or the command that started it.

  app.host.protocol  the commands and events, one JSON object per line
  app.host.wire      the objects they carry (a job's settings, costs, results) as JSON, built
                     back only for an allow-list of classes: no pickle crosses the pipe
  app.host.server    the child: `python -m app.host` (a frozen app: `draftlens --engine-host`)
  app.host.client    the parent's handle: starts the host, sends commands, reads events,
                     keeps the last lines the engine wrote to stderr, names how it ended
  app.host.keeper    the parent's side of a run's trace: it writes what the host reports and
                     finalises the trace itself when the host is stopped or dies
"""
