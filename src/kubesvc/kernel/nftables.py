"""Driving the ``nft`` binary for one table (what upstream does through knftables).

* ``run(text)`` feeds a whole transaction to ``nft -f -``: the kernel applies all of it or none.
* ``list_table()`` reads the whole table back in one ``nft -j list table`` (chains, sets and
  maps with their elements; ``terse=True`` leaves the elements out), and ``table_contents``
  turns that into chain names, set/map names and per-container ``{key: value}`` in the same
  text form the rule builder writes (``"10.0.0.1 . tcp . 80" -> "goto service-..."``).
* ``chain_rule_count(chain)`` counts one chain's rules (the interference monitor): one netlink
  query of the chain and a dump of its rules (``kernel/nftables_netlink.py``), no ``nft`` and no
  listing.
* ``delete_table_sync()`` removes the table; a missing table is not an error.

Cost model worth knowing: before applying anything that adds a rule or an element, ``nft``
reads every chain and set of the family from the kernel into its cache, so each call costs
about 1.7 ms per 1000 chains plus 3.5 ms per 1000 sets on top of ~4 ms start-up, whatever the
size of the transaction. The rule layout keeps sets few for that reason (see
``proxy/nftables/rules.py``).

``netns`` runs every command inside a named network namespace (``exec.in_netns``): tests use
it so nothing ever touches the host's own ruleset.

In-process transactions: without ``netns`` (the proxy itself, possibly started as a whole under
``ip netns exec``), ``run``/``run_sync`` call libnftables (``libnftables.so.1``, the library
the ``nft`` binary is a thin shell around) through ctypes instead of starting ``nft -f -``: the
same parser, cache and single netlink batch, so the same atomic transaction, minus ~5-10 ms of
process start per call. The text goes through a memfd read by
``nft_run_cmd_from_filename`` so error locations carry line numbers; they are reported as
``/dev/stdin:LINE:COL`` exactly as ``nft -f -`` prints them, in a ``CommandFailed`` with argv
``nft -f -`` and exit code 1. Each call uses a fresh context (20 µs): nft 1.0.6 cannot reuse
its cache across calls anyway, since our own commit bumps the ruleset generation it checks.
Calls are serialized process-wide (libnftables is not documented as thread-safe); the asyncio
form runs in a worker thread so the event loop is not blocked. Listings and
``delete_table_sync`` still use the binary.

Memory, measured with ``bench/proxy.py`` (peak = VmHWM of the proxy process, end = VmRSS after
the full sync and 25 endpoint changes; one run each, same machine and hour)::

                               10k Services × 2          5k Services × 50
    libnftables, kept as is    peak 325, end 299 MiB     peak 994, end 940 MiB
    + malloc_trim(0) after     peak 325, end 125 MiB     peak 994, end 327 MiB
    child nft above 1 MiB      peak 138, end 125 MiB     peak 378, end 336 MiB

libnftables frees what it built for a transaction (its parse of every element, its cache),
but glibc keeps the freed heap resident: ``malloc_trim(0)`` returns it (~0.1 ms), but only after
the peak. The peak is the transaction itself: a full sync at 5k × 50 is ~30 MB of text, and
nft's own objects for it are the ~600 MB between the first and the last row. So a transaction larger than ``LARGE_TRANSACTION`` (1 MiB:
full syncs and mass changes, never a steady-state partial sync) runs in a child ``nft -f -``,
whose memory is gone when it exits, for ~10 ms of process start on a sync that takes seconds;
smaller ones stay in-process and are followed by ``malloc_trim(0)`` (the chain cache of a
partial sync at 10k Services is a few MB). ``KUBESVC_NFT_LARGE=trim|keep`` re-measures the
other two.

Element-only transactions skip nft altogether: before evaluating ``add element`` or ``delete
element``, nft 1.0.6 dumps every chain of the ruleset into its cache (``src/cache.c``), ~14 ms
at 10k Services and ~40 ms at 30k for a one-element change. In-process, a transaction made of
nothing but element additions and deletions on sets our earlier transactions declared is sent
as nft would send it, one netlink batch (``kernel/nftables_netlink.py``, ~0.2 ms), with the same
atomicity and a ``CommandFailed`` carrying the kernel's error text on refusal. So is it with
the binary and in a ``netns`` (the socket is made inside it), unless ``nft`` is a stand-in
binary. ``KUBESVC_NFT_IN_PROCESS=0`` (or ``in_process=False``) forces the binary;
without the library the binary is used silently.

A full sync into a new table is mostly elements (at 5k Services × 50: 510k of its 30 MB of
text), which ``nft`` parses at ~6 µs each. Its plan can be a ``Transaction``: the whole text,
plus the element additions that nothing in the kernel reads before the transaction lands (new
endpoint slots and ranges, hairpin pairs). ``run`` then declares the table and sets in a transaction of
their declarations alone, sends those elements as one netlink batch packed in Python
(``kernel/nftables_elements.py``, ~1 µs each) and runs the rest of the text through ``nft``;
packets still meet the transaction whole. Into a table that holds nothing of ours
(``Transaction.after``) the order is the other way round: the text without any ``add element``
line first (declarations, chains, rules: every map bound while still empty, so the kernel does
not walk ~1000 slots per binding, 0.6 s at 5k × 50), then every element in one batch, the
verdict maps and the ClusterIP set included, so no Service is reachable before its slots are
there. A stand-in ``nft`` binary gets the whole text.
(Several smaller batches, sent by a thread while the next is packed, measured slower: 5.4 s
against 3.7 s for the 510k elements, load average ~19; each batch is a commit of its own.)
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import json
import logging
import os
import re
import threading
import time
from collections.abc import Collection, Mapping, Sequence

from kubesvc.kernel import nftables_elements
from kubesvc.kernel.exec import CommandFailed, in_netns, run, run_sync
from kubesvc.kernel.nftables_netlink import (NfNetlinkFailed, NftNetlink, SetType, declared_set_types, element_chunks,
                                             parse_elements_only)
from kubesvc.kernel import IPV4, IPV6

KUBE_PROXY_TABLE = "kube-proxy"

log = logging.getLogger("kubesvc.kernel.nftables")


class Transaction(str):
    """An ``nft -f`` text (the whole transaction: this string) whose element additions
    ``early`` (set → ``{key: data}``, keys the set does not hold, in sets no rule reads them
    from before the text lands) may be sent ahead of it as one netlink batch
    (``kernel/nftables_elements.py``); ``spans`` says where each such set's one ``add element``
    line is in the text (start, end past its newline). Anything that only reads the text (a
    fake kernel, a tracer) sees the whole transaction."""

    early: Mapping[str, Mapping[str, str]]
    spans: Mapping[str, tuple[int, int]]
    after: bool

    def __new__(cls, text: str, early: Mapping[str, Mapping[str, str]], spans: Mapping[str, tuple[int, int]], *,
                after: bool = False) -> Transaction:
        self = super().__new__(cls, text)
        self.early = early
        self.spans = spans
        # The table holds nothing of ours: ``spans`` names every ``add element`` line of the
        # sets, and all of them may follow the rest of the text, as one batch (see ``run``).
        self.after = after
        return self

    def rest(self, sets: Collection[str]) -> str:
        """The text without the ``add element`` lines of ``sets``: cut from it, one copy (the
        planner puts those lines last, so usually a single slice)."""
        pieces, position = [], 0
        for start, end in sorted(self.spans[name] for name in sets if name in self.spans):
            if start > position:
                pieces.append(self[position:start])
            position = end
        if position < len(self):
            pieces.append(self[position:])
        return pieces[0] if len(pieces) == 1 else "".join(pieces)


_DECLARATION = re.compile(r"^add (?:table|set|map) .*$", re.M)


def family_name(family: int) -> str:
    return "ip6" if family == IPV6 else "ip"


def is_not_found(err: CommandFailed) -> bool:
    """``nft`` reports a missing table/chain/set/element as ENOENT."""
    return "No such file or directory" in err.stderr


class NFTables:
    """One table of one family, optionally inside a network namespace."""

    def __init__(self, family: int = IPV4, table: str = KUBE_PROXY_TABLE, *, netns: str | None = None, nft: str = "nft",
                 in_process: bool | None = None):
        """``in_process``: None picks libnftables when there is no ``netns``, ``nft`` is the
        default binary, the library loads and ``KUBESVC_NFT_IN_PROCESS`` is not ``0``; True
        requires it (``OSError`` if the library is missing); False always starts ``nft``."""
        self.family = family
        self.family_name = family_name(family)
        self.table = table
        self.netns = netns
        self.nft = nft
        if in_process is None:
            in_process = (netns is None and nft == "nft" and os.environ.get("KUBESVC_NFT_IN_PROCESS", "1") != "0"
                          and libnftables() is not None)
        elif in_process:
            if netns is not None:
                raise ValueError("in-process nftables runs in this process's own network namespace; netns is not supported")
            if libnftables() is None:
                raise OSError("libnftables.so.1 is not available")
        self.in_process = in_process
        self._set_types: dict[str, SetType | None] = {}  # sets our transactions declared (stock nft only)
        self._netlink = NftNetlink(netns)
        # Seconds spent in Python (parsing and encoding elements for netlink) rather than
        # waiting on nft or the kernel, summed over every call: bench/proxy.py counts them as Python.
        self.python_seconds = 0.0

    def argv(self, *args: str) -> list[str]:
        return in_netns(self.netns, (self.nft, *args))

    # -- transactions ---------------------------------------------------------------------

    async def run(self, text: str) -> None:
        if isinstance(text, Transaction) and text.early and self.nft == "nft":
            if text.after:
                await asyncio.to_thread(self._run_then_elements, text)
                return
            text = await asyncio.to_thread(self._send_early, text)
        # An element batch takes well under a millisecond: sent from the event loop's own
        # thread, without two thread switches that cost more than that on a busy machine.
        if self._run_over_netlink(text):
            return
        if self.in_process:
            await asyncio.to_thread(self._run_in_process, text)
        else:
            await run(self.argv("-f", "-"), text)
            self._learn(text)

    def run_sync(self, text: str) -> None:
        if isinstance(text, Transaction) and text.early and self.nft == "nft":
            if text.after:
                self._run_then_elements(text)
                return
            text = self._send_early(text)
        self._run_sync(text)

    def _run_sync(self, text: str) -> None:
        if self.in_process:
            self._run_in_process(text)
        elif not self._run_over_netlink(text):
            run_sync(self.argv("-f", "-"), text)
            self._learn(text)

    def _run_in_process(self, text: str) -> None:
        """Element-only transactions on sets declared earlier go over netlink (no nft cache);
        everything else through libnftables (or a child ``nft`` when large), whose
        declarations are then remembered."""
        if self._run_over_netlink(text):
            return
        argv = self.argv("-f", "-")
        if len(text) > LARGE_TRANSACTION and LARGE_VIA == "child":
            run_sync(argv, text)
        else:
            run_in_process(argv, text)
            if LARGE_VIA != "keep":
                malloc_trim()
        self._learn(text)

    def _send_early(self, tx: Transaction) -> str:
        """Send ``tx.early`` ahead of the text (the table and sets declared first, in a
        transaction of their declarations alone); the text still to run: without the additions
        sent, or the whole ``tx`` when none could go (then nft applies all of it, or says what
        is wrong). Sets whose type or elements this module does not encode stay in the text."""
        started = time.perf_counter()
        # (the declarations all come before the element lines: read in place, no copy made)
        declarations = "\n".join(_DECLARATION.findall(tx, 0, min((start for start, _ in tx.spans.values()), default=len(tx)))) + "\n"
        self.python_seconds += time.perf_counter() - started
        try:
            self._run_sync(declarations)
        except CommandFailed:
            return str(tx)
        started = time.perf_counter()
        encoded = []
        for name, elements in tx.early.items():
            set_type = self._set_types.get(name)
            payloads = None if set_type is None else nftables_elements.encode(set_type, elements)
            if payloads is not None:  # others stay in the text
                encoded.append((name, payloads))
        try:
            batch = nftables_elements.Batch(self.family_name, self.table, encoded) if encoded else None
        except (ValueError, OSError, OverflowError):
            batch = None  # an element it cannot take: nft will name it
        finally:
            self.python_seconds += time.perf_counter() - started
        if batch is None:
            return str(tx)
        try:
            nftables_elements.send(self.netns, batch)
        except (NfNetlinkFailed, OSError) as err:
            log.info("sending %d sets' new elements ahead of the transaction failed (%s); nft adds them", len(encoded), err)
            return str(tx)
        del batch
        started = time.perf_counter()
        rest = tx.rest([name for name, _ in encoded])
        self.python_seconds += time.perf_counter() - started
        return rest

    def _run_then_elements(self, tx: Transaction) -> None:
        """A table that held nothing of ours: the text without its ``add element`` lines
        (declarations, chains, rules) through nft, then every one of those elements in one
        netlink batch: ``tx.early`` packed from pre-packed headers, the others (verdict maps,
        comments, the ClusterIP set: a few per Service) parsed from their lines. If some
        element cannot be encoded, or the kernel refuses the batch (nothing of it applied), the
        lines go to nft as a second transaction instead, which applies them or names what is
        wrong; that failure is this transaction's (the table then holds the chains and empty
        sets: no Service reachable, and the next sync is full)."""
        started = time.perf_counter()
        rest = tx.rest(tx.spans)
        self.python_seconds += time.perf_counter() - started
        self._run_sync(rest)
        del rest
        started = time.perf_counter()
        try:
            batch = self._element_batch(tx)
        except (ValueError, OSError, OverflowError, KeyError):
            batch = None
        finally:
            self.python_seconds += time.perf_counter() - started
        if batch is not None:
            try:
                nftables_elements.send(self.netns, batch)
                return
            except (NfNetlinkFailed, OSError) as err:
                log.info("adding the new table's %d sets' elements in one batch failed (%s); nft adds them", len(batch.sets), err)
            del batch
        if tx.spans:  # nft adds them (or says which one it cannot)
            self._run_sync("".join(tx[start:end] for start, end in sorted(tx.spans.values())))

    def _element_batch(self, tx: Transaction) -> nftables_elements.Batch | None:
        """The batch adding every element of ``tx``'s ``add element`` lines; None when a set's
        type is not known here or an element is not one this module encodes."""
        encoded = []
        for name, (start, end) in sorted(tx.spans.items(), key=lambda item: item[1]):
            set_type = self._set_types.get(name)
            if set_type is None:
                return None
            payloads = nftables_elements.encode(set_type, tx.early[name]) if name in tx.early else None
            if payloads is None:
                ops = parse_elements_only(tx[start:end], self.family_name, self.table, self._set_types)
                if ops is None:
                    return None
                payloads = [chunk for op in ops for chunk in element_chunks(op.elements)]
            encoded.append((name, payloads))
        return nftables_elements.Batch(self.family_name, self.table, encoded) if encoded else None

    def _learn(self, text: str) -> None:
        if self.nft == "nft" and ("add set " in text or "add map " in text):
            self._set_types.update(declared_set_types(text, self.family_name, self.table))

    def _run_over_netlink(self, text: str) -> bool:
        """Send ``text`` as one netlink batch if it only adds and deletes elements of sets we
        declared; False (nothing done) otherwise."""
        if not (self._set_types and len(text) <= LARGE_TRANSACTION and text.startswith(("add element ", "delete element "))):
            return False
        started = time.perf_counter()
        ops = parse_elements_only(text, self.family_name, self.table, self._set_types)
        self.python_seconds += time.perf_counter() - started
        if ops is None:
            return False
        try:
            self._netlink.apply(self.family_name, self.table, ops)
        except (NfNetlinkFailed, OSError) as err:
            code = err.errno if isinstance(err, NfNetlinkFailed) else (err.errno or 0)
            raise CommandFailed(self.argv("-f", "-"), 1, "", f"Error: Could not process rule: {os.strerror(code) if code else err}\n"
                                f"{getattr(err, 'what', '')}\n", text) from err
        return True

    # -- listing --------------------------------------------------------------------------

    async def _json(self, *args: str) -> list[dict]:
        return _objects((await run(self.argv("-j", *args))).stdout)

    async def list_table(self, *, terse: bool = False) -> list[dict]:
        """Every object of our table (``nft -j list table``: the table, its chains, and its sets
        and maps with their elements unless ``terse``); [] when the table does not exist."""
        try:
            return await self._json(*(("-t",) if terse else ()), "list", "table", self.family_name, self.table)
        except CommandFailed as err:
            if is_not_found(err):
                return []
            raise

    async def list_table_text(self) -> str:
        """The table as ``nft list table`` prints it (the rules' text, for ``kubesvc trace``);
        "" when the table does not exist."""
        try:
            return (await run(self.argv("list", "table", self.family_name, self.table))).stdout
        except CommandFailed as err:
            if is_not_found(err):
                return ""
            raise

    async def chain_rule_count(self, chain: str) -> int | None:
        """How many rules chain ``chain`` of our table has; None if it (or the table) is gone.
        A stand-in ``nft`` binary is asked with ``nft -j list chain`` instead."""
        if self.nft == "nft":
            try:  # one small dump, answered at once: asked from the event loop's thread
                return self._netlink.chain_rule_count(self.family_name, self.table, chain)
            except (NfNetlinkFailed, OSError) as err:
                raise CommandFailed(self.argv("list", "chain", self.family_name, self.table, chain), 1, "", str(err)) from err
        try:
            objs = await self._json("list", "chain", self.family_name, self.table, chain)
        except CommandFailed as err:
            if is_not_found(err):
                return None
            raise
        return sum(1 for o in objs if "rule" in o)

    # -- cleanup --------------------------------------------------------------------------

    def delete_table_sync(self) -> bool:
        """Delete the table; False if it did not exist."""
        try:
            run_sync(self.argv("delete", "table", self.family_name, self.table))
        except CommandFailed as err:
            if is_not_found(err):
                return False
            raise
        return True


# -- libnftables (in-process transactions) ------------------------------------------------

LARGE_TRANSACTION = 1 << 20  # bytes of text: larger ones go to a child ``nft`` (see the module docstring)
LARGE_VIA = os.environ.get("KUBESVC_NFT_LARGE", "child")  # child | trim | keep, to re-measure the choice
_libc = None


def malloc_trim() -> None:
    """Give the heap glibc keeps after libnftables freed a large transaction back to the kernel."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None)
    _libc.malloc_trim(0)


_lib: ctypes.CDLL | None = None
_lib_loaded = False
_lib_lock = threading.Lock()  # loading, and every call into the library


def libnftables() -> ctypes.CDLL | None:
    """The ctypes binding of libnftables, or None if the library cannot be loaded."""
    global _lib, _lib_loaded
    with _lib_lock:
        if not _lib_loaded:
            _lib_loaded = True
            for name in ("libnftables.so.1", ctypes.util.find_library("nftables")):
                if not name:
                    continue
                try:
                    lib = ctypes.CDLL(name)  # CDLL: the GIL is released during calls
                    lib.nft_ctx_new.restype = ctypes.c_void_p
                    lib.nft_ctx_new.argtypes = [ctypes.c_uint32]
                    lib.nft_ctx_free.restype = None
                    lib.nft_ctx_free.argtypes = [ctypes.c_void_p]
                    for fn in (lib.nft_ctx_buffer_output, lib.nft_ctx_buffer_error):
                        fn.restype = ctypes.c_int
                        fn.argtypes = [ctypes.c_void_p]
                    for fn in (lib.nft_ctx_get_output_buffer, lib.nft_ctx_get_error_buffer):
                        fn.restype = ctypes.c_char_p  # copied into bytes before the context is freed
                        fn.argtypes = [ctypes.c_void_p]
                    for fn in (lib.nft_run_cmd_from_filename, lib.nft_run_cmd_from_buffer):
                        fn.restype = ctypes.c_int
                        fn.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
                except (OSError, AttributeError):
                    continue
                _lib = lib
                break
        return _lib


def run_in_process(argv: Sequence[str], text: str) -> None:
    """``nft -f -`` with ``text`` through libnftables in this process: one atomic transaction.
    Raises ``CommandFailed(argv, 1, stdout, stderr, text)`` like the binary; error locations
    read ``/dev/stdin:LINE:COL`` as the binary prints them."""
    lib = libnftables()
    if lib is None:
        raise CommandFailed(argv, 127, "", "libnftables.so.1 is not available", text)
    data = text.encode()
    with _lib_lock:
        ctx = lib.nft_ctx_new(0)
        if not ctx:
            raise CommandFailed(argv, 1, "", "nft_ctx_new failed", text)
        try:
            if lib.nft_ctx_buffer_output(ctx) or lib.nft_ctx_buffer_error(ctx):
                raise CommandFailed(argv, 1, "", "cannot buffer libnftables output", text)
            path = None
            try:
                fd = os.memfd_create("kubesvc-nft", os.MFD_CLOEXEC)
            except (OSError, AttributeError):
                fd = -1
            if fd >= 0:
                try:
                    view = memoryview(data)
                    try:
                        while view:
                            view = view[os.write(fd, view):]
                    except OSError as oserr:
                        raise CommandFailed(argv, 1, "", f"cannot stage the transaction: {oserr}", text) from oserr
                    path = f"/proc/self/fd/{fd}"
                    rc = lib.nft_run_cmd_from_filename(ctx, path.encode())
                finally:
                    os.close(fd)
            else:  # no memfd: same transaction, error locations without line numbers
                rc = lib.nft_run_cmd_from_buffer(ctx, data)
            out = (lib.nft_ctx_get_output_buffer(ctx) or b"").decode(errors="replace")
            err = (lib.nft_ctx_get_error_buffer(ctx) or b"").decode(errors="replace")
        finally:
            lib.nft_ctx_free(ctx)
    if path is not None:
        err = err.replace(path + ":", "/dev/stdin:")
    if rc != 0:
        raise CommandFailed(argv, 1, out, err, text)


def _objects(stdout: str) -> list[dict]:
    if not stdout.strip():
        return []
    return json.loads(stdout).get("nftables", [])


def _text(value) -> str:
    """One key or value in nft's own text form (``10.0.0.1 . tcp . 80``, ``goto chain``)."""
    if isinstance(value, dict):
        if "concat" in value:
            return " . ".join(_text(v) for v in value["concat"])
        if "elem" in value:
            return _text(value["elem"]["val"])
        if "prefix" in value:
            return f"{value['prefix']['addr']}/{value['prefix']['len']}"
        if "range" in value:
            low, high = value["range"]
            return f"{_text(low)}-{_text(high)}"
        for verdict in ("goto", "jump"):
            if verdict in value:
                return f"{verdict} {value[verdict]['target']}"
        for verdict in ("drop", "accept", "return", "continue"):
            if verdict in value:
                return verdict
        raise ValueError(f"unexpected nft JSON value: {value!r}")
    return str(value)


def table_contents(objs: Sequence[dict]) -> tuple[list[str], list[str], dict[str, dict[str, str] | None]]:
    """``list_table`` output → (chain names, set and map names, ``{container: {key: value}}``).
    A container whose elements cannot be parsed maps to None (its content is unknown)."""
    chains: list[str] = []
    sets: list[str] = []
    elements: dict[str, dict[str, str] | None] = {}
    for obj in objs:
        if "chain" in obj:
            chains.append(obj["chain"]["name"])
            continue
        body = obj.get("set") or obj.get("map")
        if body is None:
            continue
        sets.append(body["name"])
        try:
            elements[body["name"]] = parse_elements(body.get("elem", ()))
        except (ValueError, KeyError, TypeError, IndexError):
            elements[body["name"]] = None
    return chains, sets, elements


def parse_elements(elems: Sequence) -> dict[str, str]:
    """``elem`` of ``nft -j list set|map`` → ``{key: value}``."""
    out: dict[str, str] = {}
    for elem in elems:
        if isinstance(elem, list):  # map: [key, value]
            out[_text(elem[0])] = _text(elem[1])
        else:
            out[_text(elem)] = ""
    return out
