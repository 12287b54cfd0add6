"""Query parameters as upstream's parameter codec (``runtime.ParameterCodec``) reads them into
an options struct: ``ListOptions``, ``PodLogOptions``, ``DeleteOptions`` and the kubelet's
log options alike, so the apiserver and the node agent read ``?follow=``, ``?tailLines=`` the
same way."""

from __future__ import annotations

from kubesvc.util import golang


def parameter_bool(query, name: str) -> bool:
    """A bool query parameter as the parameter codec reads one into an options struct
    (``Convert_Slice_string_To_bool``, :func:`golang.query_bool`): absent, "0" or "false" (any
    case) is false, anything else, even empty or ``yes``, is true. ``watch`` and
    ``allowWatchBookmarks`` are read so too (ListOptions come through the same codec)."""
    return golang.query_bool(query.get(name))


def parameter_int(query, name: str) -> int | None:
    """An int64 query parameter as the parameter codec reads one (``strconv.ParseInt``): None
    when absent or empty, ValueError with Go's words when it is not a 64-bit integer."""
    text = query.get(name, "")
    return golang.parse_int(text) if text != "" else None
