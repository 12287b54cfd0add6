"""The import-layer contract: no package of kubesvc imports one above it.

kubesvc is built in layers, lowest first (``import-linter``'s "layers" contract, written as an
AST test since the tool is not a dependency here):

    ==========  =================================================================================
    layer       packages (top-level names under ``src/kubesvc``)
    ==========  =================================================================================
    0 root      ``kubesvc`` itself (``__version__``)
    1 util      Go-compatible parsing and formatting, IP helpers, clock, asyncio helpers
    2 api       Kubernetes objects as data: kinds, scheme, defaults, validation, errors, patch
    3 storage   the revisioned key-value backends (sqlite, memory)
    4 kernel    the only code that touches the host (nft, iptables, ipset, IPVS, netlink, ...)
    5 serving   what every HTTP server shares: listening sockets, query parameters, streaming
    6 client    REST client, kubeconfig, informers, work queue, leader election, event recorder
    7 components, each on its own: ``apiserver``, ``controllers``, ``proxy``, ``agent``, ``dns``,
                ``explain`` (the diagnosis of a Service, from the API and the nodes), ``podnetwork``
                (routes between nodes' Pod CIDRs)
    8 commands  ``cmd`` (one module per command), ``up``, ``cluster`` and ``nodejoin`` (orchestration),
                ``cli``, ``__main__``, ``ui`` (the Service map: the apiserver's paths over explain and
                trace, installed by ``kubesvc apiserver``)
    ==========  =================================================================================

A module may import its own layer and the layers below it, never a layer above; the components
(layer 7) may not import one another either: what two of them share moves down a layer (as
``client/record.py``, ``serving/`` and ``api/quantity.py`` did). Every import counts, at module
level, inside functions and under ``TYPE_CHECKING`` alike: an import hidden from the
interpreter is still a dependency. Inside the apiserver the registry sits below the allocators
(which read and write through it) and below the authorization modes (which build the RBAC
strategy): the registry names the ``Allocations`` and ``RBACHooks`` protocols, never
``apiserver.allocator`` nor ``apiserver.auth.modes``.

A new top-level package fails this test until it is placed in ``LAYERS``. ``KNOWN_EXCEPTIONS``
lists the upward imports not yet fixed, each with its reason; an exception that is no longer
needed fails the test too, so the list only shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "kubesvc"

LAYERS: list[tuple[str, ...]] = [
    ("",),  # the package root, kubesvc/__init__.py
    ("util",),
    ("api",),
    ("storage",),
    ("kernel",),
    ("serving",),
    ("client",),
    ("apiserver", "controllers", "proxy", "agent", "dns", "explain", "podnetwork"),
    ("cmd", "up", "cluster", "nodejoin", "cli", "__main__", "ui"),
]
INDEPENDENT = {"apiserver", "controllers", "proxy", "agent", "dns", "explain", "podnetwork"}

# (importing module, imported module or package) -> why it is still allowed.
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {}

# (package, packages it must not import): contracts inside one component.
FORBIDDEN: list[tuple[str, str]] = [
    ("kubesvc.apiserver.registry", "kubesvc.apiserver.allocator"),
    ("kubesvc.apiserver.registry", "kubesvc.apiserver.auth.modes"),  # RBACStrategy takes the RBACHooks protocol
]

LAYER_OF = {name: index for index, names in enumerate(LAYERS) for name in names}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def resolve(module: str, path: Path, node: ast.ImportFrom) -> list[str]:
    """The modules an ``import``/``from ... import`` names (``from pkg import mod`` is ``pkg.mod``)."""
    if node.level:
        base = module.split(".")
        if path.name != "__init__.py":
            base.pop()
        base = base[: len(base) - (node.level - 1)]
        origin = ".".join(base + ([node.module] if node.module else []))
    else:
        origin = node.module or ""
    targets = []
    for alias in node.names:
        candidate = f"{origin}.{alias.name}"
        as_path = SRC.joinpath(*candidate.split("."))
        targets.append(candidate if as_path.with_suffix(".py").exists() or (as_path / "__init__.py").exists() else origin)
    return targets


def imports() -> list[tuple[str, str, str]]:
    """(importing module, imported kubesvc module, file:line) for every import in src/kubesvc."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                targets = resolve(module, path, node)
            else:
                continue
            for target in targets:
                if target == "kubesvc" or target.startswith("kubesvc."):
                    found.append((module, target, f"{path.relative_to(SRC.parent)}:{node.lineno}"))
    return found


def top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def excepted(importer: str, imported: str) -> tuple[str, str] | None:
    for key in KNOWN_EXCEPTIONS:
        if importer == key[0] and (imported == key[1] or imported.startswith(key[1] + ".")):
            return key
    return None


def violations() -> tuple[list[str], set[tuple[str, str]]]:
    problems, used = [], set()
    for importer, imported, where in imports():
        source, target = top(importer), top(imported)
        if source == target:
            continue
        upward = LAYER_OF[target] > LAYER_OF[source]
        sideways = LAYER_OF[target] == LAYER_OF[source] and source in INDEPENDENT
        if not (upward or sideways):
            continue
        if (key := excepted(importer, imported)) is not None:
            used.add(key)
            continue
        problems.append(f"{where}: {importer} ({source}, layer {LAYER_OF[source]}) imports {imported} "
                        f"({target}, layer {LAYER_OF[target]}{', a sibling component' if sideways else ''})")
    return problems, used


def test_every_top_level_package_has_a_layer():
    names = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
             if (p.suffix == ".py" or (p / "__init__.py").exists())}
    names.discard("__init__")
    assert sorted(names - LAYER_OF.keys()) == [], "place the new package in LAYERS (and in DESIGN.md's Layout)"


def test_no_layer_imports_upward():
    problems, _ = violations()
    assert problems == [], "upward imports:\n" + "\n".join(problems)


def test_known_exceptions_are_still_needed():
    _, used = violations()
    assert sorted(set(KNOWN_EXCEPTIONS) - used) == [], "these exceptions are fixed: remove them from KNOWN_EXCEPTIONS"


@pytest.mark.parametrize(("package", "forbidden"), FORBIDDEN, ids=[f"{a}-{b}" for a, b in FORBIDDEN])
def test_forbidden_imports_inside_a_component(package, forbidden):
    found = [f"{where}: {importer} imports {imported}" for importer, imported, where in imports()
             if (importer == package or importer.startswith(package + "."))
             and (imported == forbidden or imported.startswith(forbidden + "."))]
    assert found == []


def test_the_checker_sees_lazy_and_type_checking_imports(tmp_path):
    """The walk finds imports inside functions and under TYPE_CHECKING, and resolves
    ``from package import module`` to the module."""
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kubesvc.apiserver.server import APIServer\n"
              "def f():\n    from kubesvc.apiserver.auth import jwt\n")
    tree = ast.parse(source)
    path = PACKAGE / "agent" / "example.py"
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found.extend(resolve("kubesvc.agent.example", path, node))
    assert [t for t in found if t.startswith("kubesvc")] == ["kubesvc.apiserver.server", "kubesvc.apiserver.auth.jwt"]
