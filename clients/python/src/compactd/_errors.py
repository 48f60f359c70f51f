"""compactd's errors as Python exceptions, from the standard `google.rpc`
details the server attaches (`ErrorInfo`, `BadRequest`, `RetryInfo`)."""

from __future__ import annotations

from typing import Optional

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status


class CompactdError(Exception):
    """A call compactd refused or could not answer.

    `code` is the gRPC status code, `reason` the stable machine-readable
    reason (`INSUFFICIENT_BUDGET`, `SESSION_STALE`, ...), `field` the request
    field at fault (`input.json.messages[3].tool_call_id`), or "" when none is.
    """

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        *,
        reason: str = "",
        field: str = "",
        retry_after: Optional[float] = None,
        current_version: Optional[int] = None,
    ) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.reason = reason
        self.field = field
        self.retry_after = retry_after
        self.current_version = current_version


def from_rpc_error(e: grpc.RpcError) -> CompactdError:
    """The exception for a failed call, with what its details say."""
    code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
    message = e.details() if hasattr(e, "details") else str(e)
    reason, field, retry_after, current = "", "", None, None
    status = None
    try:
        status = rpc_status.from_call(e)  # type: ignore[arg-type]
    except (ValueError, AttributeError):
        status = None
    for detail in status.details if status is not None else []:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason = info.reason
            field = info.metadata.get("field", field)
            if "current_version" in info.metadata:
                current = int(info.metadata["current_version"])
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            if bad.field_violations and not field:
                field = bad.field_violations[0].field
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            retry_after = retry.retry_delay.seconds + retry.retry_delay.nanos / 1e9
    return CompactdError(
        code,
        message or "",
        reason=reason,
        field=field,
        retry_after=retry_after,
        current_version=current,
    )
