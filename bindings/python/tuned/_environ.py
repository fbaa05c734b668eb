"""_environ.py: reading the environment variables of docs/environment.md
under its rule: a variable that is set but empty counts as unset, and a
bad value is refused (ValueError naming the variable), never guessed at."""
import math
import os

_YES = ("1", "yes", "true", "on")
_NO = ("0", "no", "false", "off")


def text(name, default):
    """The variable's text, or default when it is unset or empty."""
    value = os.environ.get(name)
    return value if value else default


def flag(name, default=False):
    """A yes/no variable: 1, yes, true, on or 0, no, false, off (any case)."""
    value = text(name, None)
    if value is None:
        return default
    if value.lower() in _YES:
        return True
    if value.lower() in _NO:
        return False
    raise ValueError(f"${name}={value!r}: expected one of {', '.join(_YES + _NO)}")


def seconds(name, default):
    """A time in seconds, finite and not negative."""
    value = text(name, None)
    if value is None:
        return default
    try:
        s = float(value)
    except ValueError:
        s = math.nan
    if not math.isfinite(s) or s < 0:
        raise ValueError(f"${name}={value!r}: expected seconds (a number, 0 or more)")
    return s
