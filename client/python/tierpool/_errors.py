"""The exceptions tierpool raises: one class per status code of the server's protocol."""


class TierpoolError(Exception):
    """A call to tierpoold failed. ``code`` is the status code's value, ``code_name`` its name
    (``"NOT_FOUND"``), ``message`` what the server or the client said."""

    code = -1
    code_name = "UNKNOWN"

    def __init__(self, message="", code=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self):
        return "%s: %s" % (self.code_name, self.message) if self.message else self.code_name

    def __reduce__(self):  # picklable across DataLoader workers and futures
        return (self.__class__, (self.message, self.code))


def _make(name, code, *bases):
    cls = type(name, (TierpoolError,) + bases, {"code": code, "code_name": _NAMES[code]})
    cls.__module__ = "tierpool"
    cls.__doc__ = "Status %s (%d)." % (_NAMES[code], code)
    return cls


_NAMES = {
    1: "INVALID_ARGUMENT", 2: "NOT_FOUND", 3: "ALREADY_EXISTS", 4: "RESOURCE_EXHAUSTED",
    5: "FAILED_PRECONDITION", 6: "UNAVAILABLE", 7: "DATA_LOSS", 8: "INTERNAL",
    9: "DEADLINE_EXCEEDED", 10: "UNIMPLEMENTED", 11: "IO_ERROR", 12: "ABORTED",
    13: "PERMISSION_DENIED",
}

InvalidArgument = _make("InvalidArgument", 1, ValueError)
NotFound = _make("NotFound", 2, LookupError)
AlreadyExists = _make("AlreadyExists", 3)
ResourceExhausted = _make("ResourceExhausted", 4)
FailedPrecondition = _make("FailedPrecondition", 5)
Unavailable = _make("Unavailable", 6, ConnectionError)
DataLoss = _make("DataLoss", 7)
Internal = _make("Internal", 8)
DeadlineExceeded = _make("DeadlineExceeded", 9, TimeoutError)
Unimplemented = _make("Unimplemented", 10, NotImplementedError)
IoError = _make("IoError", 11, OSError)
Aborted = _make("Aborted", 12)
PermissionDenied = _make("PermissionDenied", 13, PermissionError)

BY_CODE = {cls.code: cls for cls in (
    InvalidArgument, NotFound, AlreadyExists, ResourceExhausted, FailedPrecondition, Unavailable,
    DataLoss, Internal, DeadlineExceeded, Unimplemented, IoError, Aborted, PermissionDenied)}


def from_status(code, message):
    """The exception for a status (called by the extension module)."""
    cls = BY_CODE.get(code, TierpoolError)
    return cls(message, code)
