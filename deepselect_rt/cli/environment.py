"""The deepselect-rt environment variables as the commands see them: checked before a command
does any work (a malformed one is one error, not a half-printed report), and listed by info."""

from __future__ import annotations


def checked_settings() -> dict[str, str]:
    """Every deepselect-rt variable that is set, by name, after checking those with a format
    (a size, seconds, an arch). Raises ValueError naming a malformed one."""
    from ..cuda import arch
    from ..jit import env

    env.cache_max_bytes()
    env.lock_timeout()
    arch.arch_override()
    return env.settings()
