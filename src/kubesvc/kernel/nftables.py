"""Driving the ``nft`` binary for one table (what upstream does through knftables).

* ``run(text)`` feeds a whole transaction to ``nft -f -``: the kernel applies all of it or none.
* ``list_chains()`` / ``list_sets()`` name what the table holds (``nft -j -t``, terse: without
  set contents), ``list_elements(name)`` reads one set or map back as ``{key: value}`` in the
  same text form the rule builder writes (``"10.0.0.1 . tcp . 80" -> "goto service-..."``).
* ``delete_table()`` removes the table; a missing table is not an error.

Cost model worth knowing: before applying anything that adds a rule or an element, ``nft``
reads every chain and set of the family from the kernel into its cache, so each call costs
about 1.7 ms per 1000 chains plus 3.5 ms per 1000 sets on top of ~4 ms start-up, whatever the
size of the transaction. The rule layout keeps sets few for that reason (see
``proxy/nftables/rules.py``).

``netns`` runs every command inside a named network namespace (``ip netns exec``): tests use
it so nothing ever touches the host's own ruleset.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from kubesvc.kernel.exec import CommandFailed, run, run_sync
from kubesvc.proxy.types import IPV4, IPV6

KUBE_PROXY_TABLE = "kube-proxy"


def family_name(family: int) -> str:
    return "ip6" if family == IPV6 else "ip"


def is_not_found(err: CommandFailed) -> bool:
    """``nft`` reports a missing table/chain/set/element as ENOENT."""
    return "No such file or directory" in err.stderr


class NFTables:
    """One table of one family, optionally inside a network namespace."""

    def __init__(self, family: int = IPV4, table: str = KUBE_PROXY_TABLE, *, netns: str | None = None, nft: str = "nft"):
        self.family = family
        self.family_name = family_name(family)
        self.table = table
        self.netns = netns
        self._prefix: tuple[str, ...] = (("ip", "netns", "exec", netns) if netns else ()) + (nft,)

    def argv(self, *args: str) -> list[str]:
        return [*self._prefix, *args]

    # -- transactions ---------------------------------------------------------------------

    async def run(self, text: str) -> None:
        await run(self.argv("-f", "-"), text)

    def run_sync(self, text: str) -> None:
        run_sync(self.argv("-f", "-"), text)

    # -- listing --------------------------------------------------------------------------

    async def _json(self, *args: str) -> list[dict]:
        return _objects((await run(self.argv("-j", *args))).stdout)

    async def list_chains(self) -> list[str]:
        """Chain names of our table; empty when the table does not exist."""
        objs = await self._json("-t", "list", "chains", self.family_name)
        return [o["chain"]["name"] for o in objs if "chain" in o and o["chain"].get("table") == self.table]

    async def list_sets(self) -> list[str]:
        """Set and map names of our table (without their contents)."""
        names: list[str] = []
        for what, key in (("sets", "set"), ("maps", "map")):
            objs = await self._json("-t", "list", what, self.family_name)
            names.extend(o[key]["name"] for o in objs if key in o and o[key].get("table") == self.table)
        return names

    async def list_all_elements(self) -> dict[str, dict[str, str]]:
        """Every set and map of our table with its elements (two ``nft`` calls in all; dynamic
        sets such as affinity sets are included)."""
        out: dict[str, dict[str, str]] = {}
        for what, key in (("sets", "set"), ("maps", "map")):
            for obj in await self._json("list", what, self.family_name):
                body = obj.get(key)
                if body is not None and body.get("table") == self.table:
                    out[body["name"]] = parse_elements(body.get("elem", ()))
        return out

    async def list_elements(self, kind: str, name: str) -> dict[str, str]:
        """Elements of set/map ``name`` as ``{key: value}`` (value ``""`` for a set).
        Raises ``CommandFailed`` (``is_not_found``) when it does not exist."""
        objs = await self._json("list", kind, self.family_name, self.table, name)
        for obj in objs:
            body = obj.get(kind)
            if body is not None:
                return parse_elements(body.get("elem", ()))
        return {}

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

    async def delete_table(self) -> bool:
        try:
            await run(self.argv("delete", "table", self.family_name, self.table))
        except CommandFailed as err:
            if is_not_found(err):
                return False
            raise
        return True


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


def parse_elements(elems: Sequence) -> dict[str, str]:
    """``elem`` of ``nft -j list set|map`` → ``{key: value}``."""
    out: dict[str, str] = {}
    for elem in elems:
        if isinstance(elem, list):  # map: [key, value]
            out[_text(elem[0])] = _text(elem[1])
        else:
            out[_text(elem)] = ""
    return out
