"""Kubernetes `Status` error bodies, with Kubernetes' own wording, raised as `ApiError`."""

from __future__ import annotations

from events.objects import Status, StatusCause, StatusDetails


class ApiError(Exception):
    """An answer that is a Status body: what the api raises to answer with it, and what its
    clients (client/api.py) raise when they are answered with it."""

    def __init__(self, status: Status) -> None:
        super().__init__(status.message)
        self.status = status

    @property
    def code(self) -> int:
        return self.status.code

    @property
    def reason(self) -> str:
        return self.status.reason


class Resource:
    """A resource's names as Kubernetes prints them: `virtualmachines.kubevirt.io`
    (each kind's come from its registry entry, `kinds.spec.KindSpec.resource`)."""

    def __init__(self, plural: str, group: str, kind: str) -> None:
        self.plural, self.group, self.kind = plural, group, kind

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


def _status(
    code: int, reason: str, message: str, res: Resource | None = None, name: str | None = None
) -> ApiError:
    details = (
        StatusDetails(name=name, group=res.group or None, kind=res.plural)
        if res is not None
        else None
    )
    return ApiError(Status(message=message, reason=reason, code=code, details=details))


def not_found(res: Resource, name: str) -> ApiError:
    return _status(404, "NotFound", f'{res} "{name}" not found', res, name)


def already_exists(res: Resource, name: str) -> ApiError:
    return _status(409, "AlreadyExists", f'{res} "{name}" already exists', res, name)


def forbidden(
    res: Resource, name: str, why: str, causes: list[StatusCause] | None = None
) -> ApiError:
    """`errors.NewForbidden`: `<resource> "<name>" is forbidden: <why>` (no name: none)."""
    message = f'{res} "{name}" is forbidden: {why}' if name else f"{res} is forbidden: {why}"
    err = _status(403, "Forbidden", message, res, name)
    if causes and err.status.details is not None:
        err.status.details.causes = causes
    return err


def conflict(res: Resource, name: str, why: str) -> ApiError:
    return _status(
        409, "Conflict", f'Operation cannot be fulfilled on {res} "{name}": {why}', res, name
    )


MODIFIED = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def stale(res: Resource, name: str) -> ApiError:
    return conflict(res, name, MODIFIED)


def bad_request(message: str) -> ApiError:
    return _status(400, "BadRequest", message)


def invalid(res: Resource, name: str, causes: list[StatusCause], message: str) -> ApiError:
    status = Status(
        message=message,
        reason="Invalid",
        code=422,
        details=StatusDetails(name=name, group=res.group or None, kind=res.kind, causes=causes),
    )
    return ApiError(status)


def method_not_allowed(
    message: str = "the server does not allow this method on the requested resource",
) -> ApiError:
    return _status(405, "MethodNotAllowed", message)


def gone(message: str) -> ApiError:
    return _status(410, "Expired", message)


def timeout(message: str) -> ApiError:
    return _status(504, "Timeout", message)


def internal(message: str) -> ApiError:
    return _status(500, "InternalError", message)


def invalid_request(message: str) -> ApiError:
    return _status(422, "Invalid", message)


def unavailable(message: str) -> ApiError:
    return _status(503, "ServiceUnavailable", message)


def request_timeout(message: str) -> ApiError:
    return _status(408, "Timeout", message)


def unknown_resource() -> ApiError:
    """404 for a path (or subject) the api does not serve, as the API server words it."""
    err = not_found(Resource("", "", ""), "")
    err.status.message = "the server could not find the requested resource"
    err.status.details = None
    return err


def read_replica() -> ApiError:
    return method_not_allowed("this is a read replica: send writes to the api")


def too_large(limit: int) -> ApiError:
    err = bad_request(f"Request entity too large: limit is {limit}")
    err.status.code, err.status.reason = 413, "RequestEntityTooLarge"
    return err
