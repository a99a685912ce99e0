"""The desktop app (PySide6 widgets, pyqtgraph charts). Nothing outside ui/ imports Qt."""

from ui._pyside_workaround import protect_none

protect_none()
