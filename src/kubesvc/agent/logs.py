"""Container logs on the node, in the CRI log format kubelet reads (upstream
pkg/kubelet/kuberuntime/logs/logs.go; the writer side is containerd's CRI logger,
pkg/cri/io/logger.go).

**Where.** One file per container *instance*, as kubelet lays out ``/var/log/pods``::

    <log_root>/<namespace>_<pod>_<pod uid>/<container>/<restart count>.log

so ``kubectl logs --previous`` finds the instance before the current one at ``restart - 1``.

**What.** One line per chunk of output, each prefixed with when it was read, which pipe it
came from and whether it ends a line (``F``ull) or is only part of one (``P``artial)::

    2026-01-01T00:00:00.123456000Z stdout F hello world
    2026-01-01T00:00:00.123457000Z stderr P a very long line is cut every 16 KiB into partial ch
    2026-01-01T00:00:00.123457000Z stderr F unks, the last one full

A chunk without a trailing newline (output still waiting for its end, or the process's last
words before exit) is written as ``P``; a line longer than 16 KiB is cut into ``P`` chunks
(containerd's ``max_container_log_line_size``). The line ending ``\\n`` or ``\\r\\n`` is not
content.

**Reading** (``read_logs``, kubelet's ``ReadLogs``) gives the content back: ``P`` chunks are
joined to the line they are part of, ``timestamps`` prefixes each line (not each chunk) with
its RFC 3339 time at nanosecond width, ``sinceTime``/``sinceSeconds`` skip older lines,
``tailLines`` starts at the n-th last line of the *file* (so a partial chunk counts as a
line, as upstream), ``limitBytes`` cuts the output after that many bytes, and ``follow``
keeps reading new lines until the container stops and the file is drained.
"""

from __future__ import annotations

import asyncio
import calendar
import os
import re
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import AsyncIterator, Callable, Mapping

from kubesvc.serving.params import parameter_bool, parameter_int
from kubesvc.util import golang
from kubesvc.util.clock import Clock, RealClock

MAX_LINE_BYTES = 16 * 1024  # containerd's default max_container_log_line_size
STREAMS = ("stdout", "stderr")
FULL, PARTIAL = b"F", b"P"
POLL_INTERVAL = 0.1  # follow: how often a quiet file is looked at again (kubelet: fsnotify, or 1 s)
_TAIL_BLOCK = 1024
_YIELD_EVERY = 1000  # lines read between turns given to the event loop
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_TIMESTAMP = re.compile(rb"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})")


def container_log_path(log_root: Path, namespace: str, pod_name: str, pod_uid: str, container: str, restart_count: int) -> Path:
    return Path(log_root) / f"{namespace}_{pod_name}_{pod_uid}" / container / f"{restart_count}.log"


# ---- time ------------------------------------------------------------------------------------


def to_nanoseconds(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(microseconds=1) * 1000


def format_timestamp(nanoseconds: int) -> bytes:
    """RFC 3339 in UTC with all nine fraction digits (kubelet's ``RFC3339NanoFixed``)."""
    seconds, fraction = divmod(nanoseconds, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)).encode() + b".%09dZ" % fraction


def parse_timestamp(text: bytes) -> int:
    """Nanoseconds since the epoch of an RFC 3339 time with 0-9 fraction digits (kubelet's
    ``RFC3339NanoLenient``); ValueError otherwise."""
    match = _TIMESTAMP.fullmatch(text)
    if match is None:
        raise ValueError(f"unexpected timestamp format {text[:40]!r}")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    seconds = calendar.timegm((year, month, day, hour, minute, second))
    zone = match[8]
    if zone != b"Z":
        offset = int(zone[1:3]) * 3600 + int(zone[4:6]) * 60
        seconds -= offset if zone[:1] == b"+" else -offset
    return seconds * 1_000_000_000 + int((match[7] or b"0").ljust(9, b"0"))


# ---- writing ---------------------------------------------------------------------------------


class ContainerLogFile:
    """The log file of one container instance, appended to line by line. Each ``write`` is
    one ``write(2)`` of whole CRI lines, so a reader never sees half a record."""

    def __init__(self, path: Path, clock: Clock | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._clock = clock or RealClock()
        # private to the node's user, as the store is (issue 15): a container's output may hold secrets
        self._file = open(os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab", buffering=0)

    def write(self, stream: str, data: bytes) -> None:
        """Record one line read from ``stream`` ("stdout" or "stderr"): with its newline a full
        line, without one a partial line."""
        if stream not in STREAMS:
            raise ValueError(f"unexpected stream type {stream!r}")
        full = data.endswith(b"\n")
        content = data[:-1] if full else data
        if full and content.endswith(b"\r"):
            content = content[:-1]
        if not content and not full:
            return
        chunks = [content[i:i + MAX_LINE_BYTES] for i in range(0, len(content), MAX_LINE_BYTES)] or [b""]
        prefix = format_timestamp(to_nanoseconds(self._clock.now())) + b" " + stream.encode() + b" "
        records = [prefix + PARTIAL + b" " + chunk + b"\n" for chunk in chunks[:-1]]
        records.append(prefix + (FULL if full else PARTIAL) + b" " + chunks[-1] + b"\n")
        self._file.write(b"".join(records))

    def close(self) -> None:
        self._file.close()


async def pump(reader: asyncio.StreamReader, stream: str, log: ContainerLogFile,
               tee: Callable[[str, bytes], None] | None = None) -> None:
    """Copy a process's pipe into its log, line by line, until EOF. A line still growing past
    16 KiB is written out in 16 KiB partial chunks as it comes, not held back. ``tee`` is also
    handed every chunk as read (``kubectl attach``'s live output)."""
    pending = b""
    while True:
        chunk = await reader.read(64 * 1024)
        if chunk and tee is not None:
            tee(stream, chunk)
        if not chunk:
            if pending:
                log.write(stream, pending)  # the last words, without a newline: a partial line
            return
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            log.write(stream, line + b"\n")
        while len(pending) > MAX_LINE_BYTES:
            log.write(stream, pending[:MAX_LINE_BYTES])
            pending = pending[MAX_LINE_BYTES:]


# ---- reading ---------------------------------------------------------------------------------


class InvalidLogOptions(ValueError):
    """The options decoded but make no sense (kubelet answers 422)."""


@dataclass(frozen=True)
class LogOptions:
    """What to read (kubelet's ``LogOptions``, from core/v1 PodLogOptions)."""

    timestamps: bool = False
    tail_lines: int | None = None  # None: from the start
    since_time: datetime | None = None  # skip lines older than this
    limit_bytes: int | None = None  # None: no limit
    follow: bool = False

    @classmethod
    def from_query(cls, query: Mapping[str, str], now: datetime) -> "LogOptions":
        """The options of a ``/containerLogs`` query. ValueError when a value does not decode;
        InvalidLogOptions when they fail upstream's ``ValidatePodLogOptions``."""
        tail, limit, since_seconds = parameter_int(query, "tailLines"), parameter_int(query, "limitBytes"), parameter_int(query, "sinceSeconds")
        since_text = query.get("sinceTime", "")
        since_time = None
        if since_text:
            since_time = golang.parse_rfc3339(since_text)
        if tail is not None and tail < 0:
            raise InvalidLogOptions("tailLines must be greater than or equal to 0")
        if limit is not None and limit < 1:
            raise InvalidLogOptions("limitBytes must be greater than 0")
        if since_seconds is not None and since_time is not None:
            raise InvalidLogOptions("at most one of `sinceTime` or `sinceSeconds` may be specified")
        if since_seconds is not None:
            if since_seconds < 1:
                raise InvalidLogOptions("sinceSeconds must be greater than 0")
            since_time = now - timedelta(seconds=since_seconds)
        return cls(timestamps=parameter_bool(query, "timestamps"), tail_lines=tail, since_time=since_time, limit_bytes=limit,
                   follow=parameter_bool(query, "follow"))


@dataclass(frozen=True)
class CRILine:
    timestamp: int  # nanoseconds since the epoch
    stream: str
    partial: bool
    content: bytes  # a full line's content ends with its "\n"; a partial chunk's has none


def parse_cri_line(line: bytes) -> CRILine:
    """Upstream ``parseCRILog``; ValueError for a line that is not one."""
    parts = line.split(b" ", 3)
    if len(parts) < 4:
        raise ValueError(f"not a CRI log line: {line[:80]!r}")
    timestamp, stream, tags, content = parts
    if stream.decode(errors="replace") not in STREAMS:
        raise ValueError(f"unexpected stream type {stream[:20]!r}")
    partial = tags.split(b":")[0] == PARTIAL  # further tags may follow a ":"
    if partial and content.endswith(b"\n"):
        content = content[:-1]
    return CRILine(parse_timestamp(timestamp), stream.decode(), partial, content)


def tail_start(f, lines: int | None) -> int:
    """Upstream ``FindTailLineStartIndex``: the offset where the last ``lines`` complete lines
    begin (an unfinished last line is not counted); 0 for all."""
    if lines is None:
        return 0
    size = f.seek(0, os.SEEK_END)
    left, count, block = size, 0, b""
    while left > 0 and count <= lines:
        start = max(0, left - _TAIL_BLOCK)
        f.seek(start)
        block = f.read(left - start)
        count += block.count(b"\n")
        left = start
    while count > lines:
        cut = block.index(b"\n") + 1
        block, left, count = block[cut:], left + cut, count - 1
    return left


class _Output:
    """Upstream ``logWriter``: the since filter, the timestamp prefix and the byte limit."""

    def __init__(self, options: LogOptions):
        self.options = options
        self.since = to_nanoseconds(options.since_time) if options.since_time is not None else None
        self.remaining = options.limit_bytes

    def render(self, line: CRILine, starts_line: bool) -> bytes:
        if self.since is not None and line.timestamp < self.since:
            return b""
        out = line.content
        if self.options.timestamps and starts_line:
            out = format_timestamp(line.timestamp) + b" " + out
        if self.remaining is not None:
            out = out[:self.remaining]
            self.remaining -= len(out)
        return out

    @property
    def exhausted(self) -> bool:
        return self.remaining is not None and self.remaining <= 0


async def read_logs(path: Path, options: LogOptions, *, is_running: Callable[[], bool],
                    poll_interval: float = POLL_INTERVAL) -> AsyncIterator[bytes]:
    """The content of a CRI log file as ``options`` ask, in pieces as they are read (upstream
    ``ReadLogs``). With ``follow`` it waits for more at the end of the file while
    ``is_running()``, then reads what is left and ends."""
    with open(path, "rb") as f:
        f.seek(tail_start(f, options.tail_lines))
        limited = options.tail_lines is not None and not options.follow
        lines_left = options.tail_lines or 0
        output = _Output(options)
        starts_line = True  # whether the next chunk begins a new line (the timestamp goes there)
        draining = False
        read = 0
        while not (limited and lines_left <= 0):
            read += 1
            if read % _YIELD_EVERY == 0:
                await asyncio.sleep(0)  # a long file (all of it skipped, say) must not hold the event loop
            raw = f.readline()
            last = False
            if not raw.endswith(b"\n"):  # the end of the file, perhaps mid-record
                if options.follow:
                    f.seek(-len(raw), os.SEEK_CUR)
                    if draining:
                        return
                    if not is_running():
                        draining = True  # one more pass for what was written before it stopped
                    else:
                        await asyncio.sleep(poll_interval)
                    continue
                if not raw:
                    return
                last = True
            try:
                line = parse_cri_line(raw)
            except ValueError:
                continue  # upstream logs and skips a malformed line
            out = output.render(line, starts_line)
            if out:
                yield out
            if output.exhausted or last:
                return
            lines_left -= 1
            starts_line = not line.content or line.content.endswith(b"\n")
