"""What a ws.v1 caller is told went wrong: each error carries its HTTP status (`api.py`)."""


class ApiError(Exception):
    status = 400


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
