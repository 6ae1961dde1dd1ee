"""The answer to a message outside a household's slice."""

from __future__ import annotations


class Refused(Exception):
    """A message outside the slice, with the OpenFlow error type and code that answer it."""

    def __init__(self, err_type: int, err_code: int, reason: str):
        super().__init__(reason)
        self.err_type = err_type
        self.err_code = err_code
