"""The file provider's errors: a local file's OSError by errno, and S3's
(botocore) by error code, HTTP status and exception type, as
TransientError or PermanentError (docs/errors.md, "Task failures:
permanent or transient"; the shape is setu_engine/providers/failures.py's)."""

from __future__ import annotations

import errno
from typing import Any

from setu_engine.errors import ProviderError, TransientError
from setu_engine.providers.failures import permanent

# -- local files, by errno

_FILE_PERMANENT = {
    errno.ENOENT: "it does not exist: check config.url",
    errno.ENOTDIR: "a part of the path is not a folder: check config.url",
    errno.EISDIR: "it is a folder where a file was expected: check config.url",
    errno.EACCES: "permission denied: give this runtime access, or check config.url",
    errno.EPERM: "operation not permitted: give this runtime access, or check config.url",
    errno.EROFS: "the file system is read-only: write somewhere else",
    errno.ELOOP: "a link points at itself: check config.url",
}
_FILE_TRANSIENT = frozenset(
    {errno.EIO, errno.EAGAIN, errno.EINTR, errno.EBUSY, errno.ETIMEDOUT, errno.ESTALE}
)


def file_error(exc: OSError, what: str) -> ProviderError:
    message = f"{what}: {exc.strerror or exc}"
    if exc.errno in _FILE_TRANSIENT:
        return TransientError(message)
    fix = _FILE_PERMANENT.get(exc.errno or 0)
    if fix is not None:
        return permanent(message, fix)
    return ProviderError(message)


# -- S3 (botocore), by error code, HTTP status and exception type

S3_KEYS = ("config.access_key_id", "config.secret_access_key")
_S3_CREDENTIALS = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403"})
_S3_MISSING = "check config.url and config.endpoint_url"
_S3_PERMANENT = {
    "NoSuchBucket": _S3_MISSING,
    "NoSuchKey": _S3_MISSING,
    "404": _S3_MISSING,
    "InvalidBucketName": "check the bucket in config.url",
    "AllAccessDisabled": "access to the bucket is disabled: check config.url",
}
_S3_TRANSIENT = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "RequestTimeout",
        "InternalError",
        "ServiceUnavailable",
    }
)
# botocore's exceptions for a connection that failed or timed out.
_S3_LOST = frozenset(
    {
        "EndpointConnectionError",
        "ConnectionClosedError",
        "ConnectTimeoutError",
        "ReadTimeoutError",
        "ConnectionError",
        "ProxyConnectionError",
        "HTTPClientError",
    }
)


def s3_error(exc: Exception, message: str) -> ProviderError:
    """`message` (which already says what failed where) classified by the
    botocore error it came from."""
    response: dict[str, Any] = getattr(exc, "response", None) or {}
    if response:
        code = str(response.get("Error", {}).get("Code", ""))
        status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        if code in _S3_TRANSIENT or status >= 500 or status == 429:
            return TransientError(message)
        if code in _S3_CREDENTIALS:
            fix = "check the access key, its secret and the key's permissions on the bucket"
            return permanent(message, fix, S3_KEYS)
        missing = _S3_PERMANENT.get(code)
        if missing is not None:
            return permanent(message, missing)
        return ProviderError(message)
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & _S3_LOST:
        return TransientError(message)
    if "NoCredentialsError" in names:
        return permanent(
            message, "no credentials: set config.access_key_id and the secret key", S3_KEYS
        )
    return ProviderError(message)
