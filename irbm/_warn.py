"""Warnings that point at the user's line, not at the library's.

``stacklevel=2`` names the caller of the function that warns, which is another irbm function
whenever the warning is raised a few calls deep (a trainer's epoch growing a model; a callback
inside ``fit``): Python then prints a line of the library, and ``-W error`` filters by module
match the wrong module. `warn_user` walks out of the package instead, up to irbm's own
command line at most: under ``irbm ...`` the command is the user, and it prints the warning in
its own voice (`irbm.cli`).
"""
from __future__ import annotations

import sys
import warnings

_PACKAGE = __name__.split(".")[0]
# Frames that stand for the user: the command line drives the library as a script would.
_ENTRY_POINTS = frozenset({f"{_PACKAGE}.cli", f"{_PACKAGE}.__main__"})
# Decorators' frames around irbm's functions (``torch.no_grad`` on a training step) are the
# library's too; one around a user's function stops the walk there, at the user's frame.
_WRAPPERS = frozenset({"torch.utils._contextlib", "contextlib", "functools"})


def _caller_level() -> int:
    """The ``stacklevel`` of a warning raised by our caller that names the first frame outside
    irbm (1 would name our caller itself; so does a stack of irbm's frames alone, a thread
    the library started)."""
    frame, level = sys._getframe(2), 1
    while frame is not None and (_inside_library(frame) or _module(frame) in _WRAPPERS):
        frame, level = frame.f_back, level + 1
    return level if frame is not None else 1


def _module(frame) -> str:
    return frame.f_globals.get("__name__", "")


def _inside_library(frame) -> bool:
    return _module(frame).split(".")[0] == _PACKAGE and _module(frame) not in _ENTRY_POINTS


def warn_user(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn(message, category)`` attributed to the first caller outside irbm."""
    warnings.warn(message, category, stacklevel=_caller_level() + 1)
