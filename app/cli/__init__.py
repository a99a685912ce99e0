"""The headless `draftlens` commands."""
