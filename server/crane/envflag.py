"""The one parser for on/off values written as text (environment variables, CLI words).

"1", "true", "yes", "on" are on; "0", "false", "no", "off" and "" are off (any case, spaces ignored); anything
else is not a boolean (None), so the caller can say so instead of guessing.
"""

from __future__ import annotations

from collections.abc import Mapping

_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off", "")


def parse_bool(text: str | None) -> bool | None:
    """True / False for the words above, None for anything else (None itself: unset, None)."""
    if text is None:
        return None
    word = text.strip().lower()
    if word in _ON:
        return True
    if word in _OFF:
        return False
    return None


def env_flag(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    """`env[name]` as a boolean; `default` when unset or not a boolean word."""
    value = parse_bool(env.get(name))
    return default if value is None else value
