"""What a ws.v1 caller is told went wrong: each error carries its HTTP status (`api.py`)."""


class ApiError(Exception):
    """details: more for the caller, beside the message (e.g. which fields were refused)."""

    status = 400

    def __init__(self, message: str = "", **details: object):
        super().__init__(message)
        self.details = details


class UnknownDevice(ApiError):
    status = 404


class NotConfigured(ApiError):
    status = 501


class DeviceBlocked(ApiError):
    """A permit or deny of a blacklisted device: only lifting the block (`whitelist`) changes it."""

    status = 409


class Conflict(ApiError):
    """A change the device's state does not allow now (merging a device that is online)."""

    status = 409
