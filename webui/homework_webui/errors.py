"""How the API answers what went wrong: an `ApiError` raised anywhere becomes a JSON error, and
`ask_controller` is the one place that says what the controller's refusals mean to the page."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from flask import Flask, Response, jsonify

from .controller import ControllerDownError, ControllerError
from .hwdb import HwdbError


class ApiError(Exception):
    def __init__(self, status: int, message: str, **extra):
        super().__init__(message)
        self.status, self.extra = status, extra


def ask_controller(call: Callable[..., Any], *args, meaning: Mapping[int, tuple[str, str | None]] | None = None) -> Any:
    """`call(*args)` on the controller client. `meaning`: what a refusal status means for this
    route, as (the page's error code, its message or None for the controller's own); any other
    refusal is answered with the controller's status and message, and a controller that does
    not answer at all is a 503 (the app's handlers below)."""
    try:
        return call(*args)
    except ControllerError as exc:
        code, message = (meaning or {}).get(exc.status, (None, None))
        if code is None:
            raise
        raise ApiError(exc.status, message or str(exc), code=code, component="controller") from None


def register_handlers(app: Flask, controller_down: Callable[[], None]) -> None:
    """`controller_down`: told when the controller did not answer (the live pages learn it)."""

    @app.errorhandler(ApiError)
    def api_error(exc):
        return error(exc.status, str(exc), **exc.extra)

    @app.errorhandler(ControllerDownError)
    def controller_not_answering(exc):
        controller_down()
        if exc.unconfirmed:
            return error(
                503,
                "The router's controller did not confirm this in time (it is busy); "
                "it may still take effect: look again in a moment.",
                component="controller",
                code="unconfirmed",
            )
        return error(
            503,
            "The router's controller is not answering; this page will recover when it is back.",
            component="controller",
        )

    @app.errorhandler(ControllerError)
    def controller_refused(exc):
        if exc.status == 403:  # the controller's authority table: this role may not (its reason)
            return error(403, str(exc), code="role", component="controller")
        return error(exc.status if 400 <= exc.status < 600 else 502, str(exc), component="controller")

    @app.errorhandler(HwdbError)
    def hwdb_down(exc):
        return error(
            503,
            f"The router's database is not answering ({exc}); this page will recover when it is back.",
            component="hwdb",
        )

    @app.errorhandler(404)
    @app.errorhandler(405)
    @app.errorhandler(413)
    def http_error(exc):
        return error(exc.code, exc.description)


def error(status: int, message: str, **extra):
    resp = jsonify({"error": message, **extra})
    resp.status_code = status
    if "retry_after" in extra:
        resp.headers["Retry-After"] = str(extra["retry_after"])
    return resp


def plain(status: int, message: str):
    return Response(message + "\n", status=status, mimetype="text/plain")
