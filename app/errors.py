"""The project's exception types: each message says what is wrong and what to do."""


class DraftLensError(Exception):
    """Base for errors shown to the user as a one-line message."""


class ModelFileError(DraftLensError):
    """A model file is missing, unreadable, malformed or would crash the runtime."""


class IncompatiblePairError(DraftLensError):
    """Target and draft cannot be used together."""


class SettingsError(DraftLensError):
    """A decode setting or CLI value is out of range."""


class DownloadError(DraftLensError):
    """Fetching or reassembling the demo pair failed."""


class DownloadCancelled(DownloadError):
    """The user cancelled a download; what was fetched so far is kept for the next try."""


class TraceWriteError(DraftLensError):
    """The trace file could not be written any more (disk full, file or folder deleted)."""


class ModelOutputError(DraftLensError):
    """A model returned numbers that cannot be a distribution (NaN or infinite logits)."""


class DraftMemoryError(DraftLensError):
    """The draft memory file (earlier outputs kept for suffix drafting) is unreadable or
    damaged, or cannot be written."""
