"""Subcommands of this area are registered here (work in progress)."""

from __future__ import annotations

from typing import Any


def register(sub: Any) -> None:
    """Nothing registered yet."""
