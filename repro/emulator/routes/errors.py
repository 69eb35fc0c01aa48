"""vLLM's error answers: `ApiError` (raised while validating a request) and `error_response`."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse


class ApiError(Exception):
    """A request vLLM would refuse: ``status`` (HTTP), ``err_type`` (the body's ``type``) and the
    offending ``param`` (or None). Turned into a response with `ApiError.response`."""

    def __init__(self, message: str, err_type: str = "BadRequestError", status: int = 400, param: str | None = None):
        super().__init__(message)
        self.message = message
        self.err_type = err_type
        self.status = status
        self.param = param

    def response(self) -> JSONResponse:
        return error_response(self.message, self.err_type, self.status, self.param)


def error_response(message: str, err_type: str = "BadRequestError", status: int = 400,
                   param: str | None = None) -> JSONResponse:
    """vLLM's ``ErrorResponse``: ``{"error": {"message", "type", "param", "code"}}``."""
    return JSONResponse({"error": {"message": message, "type": err_type, "param": param, "code": status}},
                        status_code=status)


def validation_error(msg: str, loc: tuple, value: Any, kind: str = "value_error") -> ApiError:
    """The shape vLLM gives a request-model validation failure (HTTP 400, type 'Bad Request'):
    the message is the printed pydantic error list, ``loc`` the path inside the body."""
    detail = [{"type": kind, "loc": ("body",) + loc, "msg": msg, "input": value}]
    return ApiError(f"{detail}", err_type="Bad Request", status=400)
