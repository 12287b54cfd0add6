"""In-process nftables transactions (libnftables through ctypes, ``kernel/nftables.py``).

Which path ``NFTables`` picks is checked here directly. The kernel part runs a child Python
inside a throwaway network namespace (in-process means "in this process's namespace", so the
test process itself, which lives in the host namespace, must never apply anything) and checks
that a transaction applied through the library behaves as ``nft -f -``: applied atomically,
and a rejected one raises the same ``CommandFailed`` (argv, exit code, stderr text with
``/dev/stdin:LINE:COL`` locations, the input) as the binary.
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from kubesvc.kernel import nftables
from kubesvc.kernel.nftables import NFTables
from tests.support.netns import Netns

pytestmark = pytest.mark.kernel


def _require_lib() -> None:
    """libnftables is part of the supported setup: its absence fails these tests, never skips them."""
    if nftables.libnftables() is None:
        pytest.fail("libnftables.so.1 is not installed", pytrace=False)


@pytest.fixture
def needs_lib_fixture():
    _require_lib()


needs_lib = pytest.mark.usefixtures("needs_lib_fixture")


@needs_lib
def test_in_process_is_the_default_without_netns(monkeypatch):
    monkeypatch.delenv("KUBESVC_NFT_IN_PROCESS", raising=False)
    assert NFTables().in_process


def test_netns_custom_binary_and_switch_use_the_binary(monkeypatch):
    monkeypatch.delenv("KUBESVC_NFT_IN_PROCESS", raising=False)
    assert not NFTables(netns="somewhere").in_process
    assert not NFTables(nft="/usr/local/sbin/nft").in_process
    assert not NFTables(in_process=False).in_process
    monkeypatch.setenv("KUBESVC_NFT_IN_PROCESS", "0")
    assert not NFTables().in_process


def test_in_process_refuses_a_netns():
    with pytest.raises(ValueError):
        NFTables(netns="somewhere", in_process=True)


CHILD = textwrap.dedent("""
    import asyncio, json, subprocess, sys
    from kubesvc.kernel.exec import CommandFailed
    from kubesvc.kernel.nftables import NFTables, is_not_found

    nft = NFTables(table="lnft-test", in_process=True)
    out = {}
    nft.run_sync("add table ip lnft-test\\nadd chain ip lnft-test c\\nadd rule ip lnft-test c counter\\n")
    asyncio.run(nft.run("add set ip lnft-test s { type ipv4_addr; }\\nadd element ip lnft-test s { 10.0.0.1 }\\n"))
    out["listed"] = subprocess.run(["nft", "list", "table", "ip", "lnft-test"], capture_output=True, text=True).stdout

    bad = "add chain ip lnft-test d\\nadd rule ip lnft-test nochain counter\\n"
    for name, call in (("sync", lambda: nft.run_sync(bad)), ("async", lambda: asyncio.run(nft.run(bad)))):
        try:
            call()
            out[name] = None
        except CommandFailed as err:
            out[name] = {"argv": list(err.argv), "returncode": err.returncode, "stderr": err.stderr,
                         "input": err.input_text, "not_found": is_not_found(err)}
    binary = subprocess.run(["nft", "-f", "-"], input=bad, capture_output=True, text=True)
    out["binary"] = {"returncode": binary.returncode, "stderr": binary.stderr}
    out["after_failure"] = subprocess.run(["nft", "-t", "list", "chains", "ip"], capture_output=True, text=True).stdout
    nft.run_sync("")  # an empty transaction is fine, as for nft -f -
    nft.run_sync("delete table ip lnft-test\\n")
    out["deleted"] = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    print(json.dumps(out))
""")


@needs_lib
def test_in_process_transaction_in_a_namespace():
    ns = Netns.create("lib")
    try:
        proc = ns.run(sys.executable, "-c", CHILD, check=False, timeout=60)
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        ns.close()

    assert "chain c" in out["listed"] and "counter" in out["listed"] and "10.0.0.1" in out["listed"]
    bad = "add chain ip lnft-test d\nadd rule ip lnft-test nochain counter\n"
    for name in ("sync", "async"):
        failed = out[name]
        assert failed is not None, f"{name}: a rejected transaction must raise"
        assert failed["argv"] == ["nft", "-f", "-"]
        assert failed["returncode"] == out["binary"]["returncode"] == 1
        assert failed["stderr"] == out["binary"]["stderr"]  # identical text, /dev/stdin:2:... location included
        assert failed["stderr"].startswith("/dev/stdin:2:")
        assert failed["input"] == bad and failed["not_found"]
    assert "chain d" not in out["after_failure"]  # atomic: the chain of the rejected transaction is not there
    assert "lnft-test" not in out["deleted"]
