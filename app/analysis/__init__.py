"""Analyses over runs: the cost model's view, draft-length sweeps, draft ranking, rejection
analysis and the exactness check. Headless (no Qt); the CLI and the window share them."""
