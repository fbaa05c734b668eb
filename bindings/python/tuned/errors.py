"""Exceptions of the tuned package."""


class TunedError(RuntimeError):
    """A libtuned call failed: code is the negative TUNED_E* value, name its
    tuned_strerror() text, message the library's own explanation."""

    def __init__(self, code, name, message):
        super().__init__(f"{message} ({name}, {code})")
        self.code = code
        self.name = name
        self.message = message


class LibraryError(ImportError):
    """libtuned could not be loaded (the message says what was tried)."""


class DaemonError(RuntimeError):
    """The daemon answered {"ok": false}: code is its stable error code
    (docs/protocol.md, e.g. "no_gpu"), message its text."""

    def __init__(self, code, message, reply=None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.reply = reply


class FallbackError(RuntimeError):
    """Strict mode (tuned.set_strict(True), or TUNED_STRICT=1): a call that
    would have fallen back to torch raises this instead; the message says
    why it could not run libtuned's kernel."""
