"""Exceptions raised by the binding. Every failing C call becomes one of these, carrying the
library's status name and its one-line message (tl_last_error() of the calling thread)."""

from . import _lib


class TokenloomError(Exception):
    """A tokenloom call failed. `status` is the C status code, `message` tl_last_error()."""

    def __init__(self, status, message):
        self.status = status
        self.message = message
        super().__init__(message or _lib.tl_status_str(status).decode())


class InvalidArgumentError(TokenloomError, ValueError):
    """TL_ERR_INVALID_ARG: a value is out of range or malformed."""


class ModelFileError(TokenloomError, OSError):
    """TL_ERR_IO / TL_ERR_FORMAT / TL_ERR_UNSUPPORTED: the model file cannot be used."""


class TooLongError(TokenloomError, ValueError):
    """TL_ERR_TOO_LONG: the prompt plus max_tokens cannot fit the context or the KV pool."""


class QueueFullError(TokenloomError):
    """TL_ERR_FULL: the engine's waiting queue is full; retry after stepping."""


class NotFoundError(TokenloomError, KeyError):
    """TL_ERR_NOT_FOUND: no such request (it already finished)."""

    def __str__(self):  # KeyError would quote the message
        return self.message


_BY_STATUS = {
    -1: InvalidArgumentError,
    -2: TokenloomError,
    -3: ModelFileError,
    -4: ModelFileError,
    -5: ModelFileError,
    -6: TooLongError,
    -7: QueueFullError,
    -8: NotFoundError,
}


def raise_for(status):
    """Raises the exception for a non-zero tl_status, with tl_last_error() as its message."""
    if status == 0:
        return
    message = _lib.tl_last_error().decode("utf-8", "replace")
    if status == -2:
        raise MemoryError(message)
    raise _BY_STATUS.get(status, TokenloomError)(status, message)
