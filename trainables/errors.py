"""The errors that mean "bad input": each names the option or field to fix (exit 2). No torch, so the command
line can import them before deciding whether it needs torch at all."""
from __future__ import annotations


class SpecError(ValueError):
    """Invalid input; `field` names the offending spec field or option."""

    def __init__(self, field_name: str, message: str):
        super().__init__(f"{field_name}: {message}")
        self.field, self.message = field_name, message

    def __reduce__(self):  # raised in a Ray worker, it is pickled and copied on its way to the driver
        return type(self), (self.field, self.message)


class DataError(SpecError):
    """A dataset that cannot be read; `field` names the option to fix."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be trusted; the message names its path."""

    field = "start"
