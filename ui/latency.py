"""Keeping the UI thread's pauses short while decoding.

The heap of a loaded app is large (torch and transformers alone bring a few hundred thousand
objects), and a full garbage collection walks all of it while holding the GIL: measured here,
60-130 ms during which neither the UI nor the engine runs. `freeze_heap` collects once, at a
moment when nothing is being drawn or decoded, and moves everything alive into the permanent
generation, so later collections only walk what was allocated since.
"""

from __future__ import annotations

import gc


def freeze_heap() -> None:
    """Collect once, then exclude every object alive now from future collections."""
    gc.collect()
    gc.freeze()
