"""CRI container logs: the file format (containerd's writer) and reading it back as kubelet's
ReadLogs does (P chunks joined, tail/since/limit/timestamps, follow until the container stops)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from kubesvc.agent.logs import (
    MAX_LINE_BYTES,
    ContainerLogFile,
    InvalidLogOptions,
    LogOptions,
    container_log_path,
    format_timestamp,
    parse_cri_line,
    parse_timestamp,
    pump,
    read_logs,
    tail_start,
)
from kubesvc.util.clock import FakeClock

START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def records(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def log_file(tmp_path: Path) -> tuple[ContainerLogFile, FakeClock]:
    clock = FakeClock(START)
    return ContainerLogFile(tmp_path / "c" / "0.log", clock), clock


async def read_all(path: Path, options: LogOptions = LogOptions(), running=lambda: False) -> bytes:
    return b"".join([chunk async for chunk in read_logs(path, options, is_running=running, poll_interval=0.01)])


def test_container_log_path_is_kubelets_pod_log_layout(tmp_path):
    assert container_log_path(tmp_path, "ns", "web", "uid-1", "app", 2) == tmp_path / "ns_web_uid-1" / "app" / "2.log"


# ---- writing ---------------------------------------------------------------------------------


WRITES = [
    ("full line", [("stdout", b"hello\n")], [b"2026-01-01T00:00:00.000000000Z stdout F hello\n"]),
    ("crlf is a line ending", [("stdout", b"hello\r\n")], [b"2026-01-01T00:00:00.000000000Z stdout F hello\n"]),
    ("empty line", [("stderr", b"\n")], [b"2026-01-01T00:00:00.000000000Z stderr F \n"]),
    ("no newline is partial", [("stdout", b"wor"), ("stdout", b"ld\n")],
     [b"2026-01-01T00:00:00.000000000Z stdout P wor\n", b"2026-01-01T00:00:00.000000000Z stdout F ld\n"]),
    ("nothing is nothing", [("stdout", b"")], []),
    ("spaces kept", [("stdout", b"  a  b \n")], [b"2026-01-01T00:00:00.000000000Z stdout F   a  b \n"]),
]


@pytest.mark.parametrize("writes, expected", [(w, e) for _, w, e in WRITES], ids=[name for name, _, _ in WRITES])
def test_write_format(tmp_path, writes, expected):
    log, _ = log_file(tmp_path)
    for stream, data in writes:
        log.write(stream, data)
    log.close()
    assert records(log.path) == expected


def test_timestamps_come_from_the_clock_at_nanosecond_width(tmp_path):
    log, clock = log_file(tmp_path)
    log.write("stdout", b"a\n")
    clock.advance(1.5)
    log.write("stdout", b"b\n")
    assert [r.split(b" ")[0] for r in records(log.path)] == [b"2026-01-01T00:00:00.000000000Z", b"2026-01-01T00:00:01.500000000Z"]


def test_a_long_line_is_cut_into_16k_partial_chunks(tmp_path):
    log, _ = log_file(tmp_path)
    log.write("stdout", b"x" * (2 * MAX_LINE_BYTES + 5) + b"\n")
    lines = [parse_cri_line(r) for r in records(log.path)]
    assert [(line.partial, len(line.content)) for line in lines] == [(True, MAX_LINE_BYTES), (True, MAX_LINE_BYTES), (False, 6)]


def test_a_line_of_exactly_16k_stays_whole(tmp_path):
    log, _ = log_file(tmp_path)
    log.write("stdout", b"y" * MAX_LINE_BYTES + b"\n")
    assert [parse_cri_line(r).partial for r in records(log.path)] == [False]


def test_unknown_stream_is_refused(tmp_path):
    log, _ = log_file(tmp_path)
    with pytest.raises(ValueError):
        log.write("stdin", b"x\n")


async def test_pump_copies_a_pipe_line_by_line_and_ends_with_a_partial(tmp_path):
    log, _ = log_file(tmp_path)
    reader = asyncio.StreamReader()
    task = asyncio.create_task(pump(reader, "stderr", log))
    reader.feed_data(b"one\ntw")
    reader.feed_data(b"o\nthr")
    reader.feed_data(b"ee")
    reader.feed_eof()
    await task
    assert [(line.stream, line.partial, line.content) for line in map(parse_cri_line, records(log.path))] == [
        ("stderr", False, b"one\n"), ("stderr", False, b"two\n"), ("stderr", True, b"three")]


async def test_pump_cuts_a_line_that_grows_past_16k_before_its_end(tmp_path):
    log, _ = log_file(tmp_path)
    reader = asyncio.StreamReader(limit=1 << 20)
    task = asyncio.create_task(pump(reader, "stdout", log))
    reader.feed_data(b"z" * (MAX_LINE_BYTES + 10))
    await asyncio.sleep(0.01)
    assert [parse_cri_line(r).partial for r in records(log.path)] == [True]  # written before the line ends
    reader.feed_data(b"\n")
    reader.feed_eof()
    await task
    assert await read_all(log.path) == b"z" * (MAX_LINE_BYTES + 10) + b"\n"


# ---- parsing ---------------------------------------------------------------------------------


TIMES = [
    ("nanoseconds", b"2016-10-06T00:17:09.669794202Z", 1475713029_669794202),
    ("no fraction", b"2016-10-06T00:17:09Z", 1475713029_000000000),
    ("short fraction", b"2016-10-06T00:17:09.5Z", 1475713029_500000000),
    ("offset", b"2016-10-06T02:17:09.5+02:00", 1475713029_500000000),
]


@pytest.mark.parametrize("text, nanoseconds", [(t, n) for _, t, n in TIMES], ids=[name for name, _, _ in TIMES])
def test_parse_timestamp_is_lenient_rfc3339nano(text, nanoseconds):
    assert parse_timestamp(text) == nanoseconds


def test_format_timestamp_is_fixed_width():
    assert format_timestamp(1475713029_500000000) == b"2016-10-06T00:17:09.500000000Z"


@pytest.mark.parametrize("line", [b"2016-10-06T00:17:09Z stdout F\n", b"nope stdout F x\n", b"2016-10-06T00:17:09Z stdin F x\n"],
                         ids=["no content delimiter", "bad time", "bad stream"])
def test_malformed_lines_are_errors(line):
    with pytest.raises(ValueError):
        parse_cri_line(line)


def test_further_tags_after_a_colon_are_ignored():
    assert parse_cri_line(b"2016-10-06T00:17:09Z stdout P:x abc\n").partial


# ---- reading ---------------------------------------------------------------------------------


@pytest.fixture
def sample(tmp_path) -> Path:
    """Four lines a second apart; the third written in two chunks."""
    log, clock = log_file(tmp_path)
    for data in (b"one\n", b"two\n", b"thr", b"ee\n", b"four\n"):
        log.write("stdout" if data != b"two\n" else "stderr", data)
        clock.advance(1)
    log.close()
    return log.path


READS = [
    ("all", LogOptions(), b"one\ntwo\nthree\nfour\n"),
    ("tail 2 counts file lines", LogOptions(tail_lines=2), b"ee\nfour\n"),
    ("tail 3", LogOptions(tail_lines=3), b"three\nfour\n"),
    ("tail 0", LogOptions(tail_lines=0), b""),
    ("tail beyond", LogOptions(tail_lines=100), b"one\ntwo\nthree\nfour\n"),
    ("since", LogOptions(since_time=START + timedelta(seconds=2)), b"three\nfour\n"),
    ("limit cuts mid line", LogOptions(limit_bytes=6), b"one\ntw"),
    ("timestamps per line not per chunk", LogOptions(timestamps=True, tail_lines=3),
     b"2026-01-01T00:00:02.000000000Z three\n2026-01-01T00:00:04.000000000Z four\n"),
    ("limit counts the timestamps", LogOptions(timestamps=True, limit_bytes=33), b"2026-01-01T00:00:00.000000000Z on"),
]


@pytest.mark.parametrize("options, expected", [(o, e) for _, o, e in READS], ids=[name for name, _, _ in READS])
async def test_read_logs(sample, options, expected):
    assert await read_all(sample, options) == expected


def test_tail_start_ignores_an_unfinished_last_line(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"a\nb\nc")
    with open(path, "rb") as f:
        assert tail_start(f, 1) == 2
        assert tail_start(f, 0) == 4
        assert tail_start(f, None) == 0


def test_tail_start_across_blocks(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"".join(b"%04d\n" % i for i in range(1000)))
    with open(path, "rb") as f:
        start = tail_start(f, 300)
        f.seek(start)
        assert f.read().splitlines() == [b"%04d" % i for i in range(700, 1000)]


async def test_malformed_lines_are_skipped(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"garbage\n2016-10-06T00:17:09Z stdout F ok\n")
    assert await read_all(path) == b"ok\n"


async def test_follow_streams_new_lines_until_the_container_stops(tmp_path):
    log, _ = log_file(tmp_path)
    log.write("stdout", b"first\n")
    running = True
    got: list[bytes] = []

    async def follow():
        async for chunk in read_logs(log.path, LogOptions(follow=True), is_running=lambda: running, poll_interval=0.01):
            got.append(chunk)

    task = asyncio.create_task(follow())
    await asyncio.sleep(0.05)
    assert got == [b"first\n"]
    log.write("stdout", b"second\n")
    await asyncio.sleep(0.05)
    assert got == [b"first\n", b"second\n"]
    assert not task.done()
    log.write("stderr", b"last words\n")  # written before it stopped: still read
    running = False
    await asyncio.wait_for(task, 2)
    assert got == [b"first\n", b"second\n", b"last words\n"]


async def test_follow_with_tail_starts_near_the_end(sample):
    assert await read_all(sample, LogOptions(follow=True, tail_lines=1)) == b"four\n"


async def test_follow_waits_for_the_rest_of_a_half_written_record(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"2016-10-06T00:17:09Z stdout F hel")
    running = True
    got: list[bytes] = []

    async def follow():
        async for chunk in read_logs(path, LogOptions(follow=True), is_running=lambda: running, poll_interval=0.01):
            got.append(chunk)

    task = asyncio.create_task(follow())
    await asyncio.sleep(0.05)
    assert got == []
    with open(path, "ab") as f:
        f.write(b"lo\n")
    await asyncio.sleep(0.05)
    running = False
    await asyncio.wait_for(task, 2)
    assert got == [b"hello\n"]


# ---- options ---------------------------------------------------------------------------------

NOW = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)

QUERIES = [
    ("empty", {}, LogOptions()),
    ("everything", {"timestamps": "true", "follow": "1", "tailLines": "5", "limitBytes": "10"},
     LogOptions(timestamps=True, follow=True, tail_lines=5, limit_bytes=10)),
    ("false spelled out", {"follow": "false", "timestamps": "0"}, LogOptions()),
    ("since seconds", {"sinceSeconds": "60"}, LogOptions(since_time=NOW - timedelta(seconds=60))),
    ("since time", {"sinceTime": "2026-01-01T11:00:00Z"}, LogOptions(since_time=datetime(2026, 1, 1, 11, tzinfo=timezone.utc))),
]


@pytest.mark.parametrize("query, expected", [(q, e) for _, q, e in QUERIES], ids=[name for name, _, _ in QUERIES])
def test_options_from_query(query, expected):
    assert LogOptions.from_query(query, NOW) == expected


BAD_QUERIES = [
    ("negative tail", {"tailLines": "-1"}, InvalidLogOptions),
    ("zero limit", {"limitBytes": "0"}, InvalidLogOptions),
    ("zero since", {"sinceSeconds": "0"}, InvalidLogOptions),
    ("both sinces", {"sinceSeconds": "5", "sinceTime": "2026-01-01T11:00:00Z"}, InvalidLogOptions),
    ("not a number", {"tailLines": "ten"}, ValueError),
    ("not a time", {"sinceTime": "yesterday"}, ValueError),
]


@pytest.mark.parametrize("query, error", [(q, e) for _, q, e in BAD_QUERIES], ids=[name for name, _, _ in BAD_QUERIES])
def test_bad_options(query, error):
    """InvalidLogOptions (kubelet: 422) for values that decode but fail validation, a plain
    ValueError (kubelet: 400) for values that do not decode."""
    with pytest.raises(ValueError) as caught:
        LogOptions.from_query(query, NOW)
    assert isinstance(caught.value, InvalidLogOptions) == (error is InvalidLogOptions)


def test_log_file_is_private_to_the_node(tmp_path):
    """A container's output may hold secrets: its log file is 0600 whatever the umask."""
    log = ContainerLogFile(tmp_path / "c" / "0.log", FakeClock(datetime(2026, 1, 1, tzinfo=timezone.utc)))
    log.write("stdout", b"token=s3cret\n")
    assert (tmp_path / "c" / "0.log").stat().st_mode & 0o777 == 0o600
