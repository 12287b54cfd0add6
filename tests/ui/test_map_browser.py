"""The Service map in a real browser under ``kubesvc up``, as a user opens it: Debian's chromium,
headless, driven by Selenium through ``/usr/bin/chromedriver`` (scripts/install.sh installs both;
nothing is downloaded), running inside the machine's network namespace so it reaches only
``up``'s loopback apiserver.

The user applies the examples (``kubectl apply -f examples/``), makes a token as the README says
(a ServiceAccount bound to a read-only ClusterRole, ``kubectl create token``), opens
``https://127.0.0.1:<port>/ui/``, signs in, and sees every example Service with its Pods and their
conditions. One backend is made to fail its readiness probe (``POST /unready``, as the README
does): its box turns from the ready colour to the not-ready colour in the open page, with no
reload. Selecting a Service shows ``kubesvc explain``'s and ``kubesvc trace``'s answers. The
screenshot is checked to be a picture (many colours), not a blank page. Without a credential
the same URL is a 401.

The browser accepts the apiserver's self-signed serving certificate (``acceptInsecureCerts``):
the connection is still TLS, only the chain is not checked against a CA the browser trusts.
``KUBESVC_UI_SCREENSHOT=<path>`` also saves the screenshot there (docs/service-map.png is made so).
"""

from __future__ import annotations

import os
import shutil
import struct
import time
import zlib
from pathlib import Path

import pytest
import requests

from tests.support.netns import REPO_ROOT, Netns, call_in_netns
from tests.support.up import Machine

pytestmark = pytest.mark.kernel

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--window-size=1300,1200")
READER_ROLE = ("create", "clusterrole", "service-map-reader", "--verb=get,list,watch",
               "--resource=services,endpointslices.discovery.k8s.io,pods,nodes,events")
# the example Services and the Pods their selectors pick, as examples/*.yaml write them
EXAMPLE_PODS = {
    "service/default/my-service": {"pod/default/backend-1", "pod/default/backend-2", "pod/default/backend-3"},
    "service/default/sticky": {"pod/default/backend-1", "pod/default/backend-2", "pod/default/backend-3"},
    "service/default/udp-echo": {"pod/default/udp-echo-1", "pod/default/udp-echo-2"},
}

SNAPSHOT_JS = """
const boxes = {};
document.querySelectorAll('#map g.box').forEach((g) => {
  boxes[g.dataset.id] = {state: g.dataset.state, fill: getComputedStyle(g.querySelector('rect')).fill};
});
const edges = [...document.querySelectorAll('#map line')].map((l) => [l.dataset.from, l.dataset.to]);
return {boxes, edges, marker: window.__notReloaded || null, status: document.getElementById('status').textContent};
"""


class Browser:
    """A chromium session whose every call runs on a thread inside the machine's namespace (the
    driver process and its connections live there)."""

    def __init__(self, netns: str, profile: Path):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        self.netns = netns
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in (*FLAGS, f"--user-data-dir={profile}"):
            options.add_argument(flag)
        options.set_capability("acceptInsecureCerts", True)
        self.driver = self.call(lambda: webdriver.Chrome(options=options, service=Service(CHROMEDRIVER)))

    def call(self, fn, *args):
        return call_in_netns(self.netns, fn, *args)

    def get(self, url: str) -> None:
        self.call(self.driver.get, url)

    def js(self, script: str, *args):
        return self.call(self.driver.execute_script, script, *args)

    def wait_for(self, script: str, what: str, timeout: float = 60):
        """The value of ``script`` once it is truthy."""
        deadline = time.monotonic() + timeout
        while not (value := self.js(script)):
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not seen within {timeout} s")
            time.sleep(0.2)
        return value

    def until(self, check, what: str, timeout: float = 60):
        """The page snapshot once ``check(snapshot)`` holds."""
        deadline = time.monotonic() + timeout
        while True:
            snap = self.js(SNAPSHOT_JS)
            if check(snap):
                return snap
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not seen within {timeout} s; page: {snap}")
            time.sleep(0.5)

    def quit(self) -> None:
        self.call(self.driver.quit)


@pytest.fixture(scope="module")
def machine(tmp_path_factory):
    made = Machine(Netns.create("ui"), tmp_path_factory.mktemp("ui"))
    try:
        made.up()
        made.kubectl("apply", "-f", str(REPO_ROOT / "examples"))
        made.kubectl("create", "serviceaccount", "map-viewer")
        made.kubectl(*READER_ROLE)
        made.kubectl("create", "clusterrolebinding", "map-viewer", "--clusterrole=service-map-reader", "--serviceaccount=default:map-viewer")
        yield made
    finally:
        made.teardown()


@pytest.fixture(scope="module")
def browser(machine, tmp_path_factory):
    saved = os.environ.get("SE_OFFLINE")
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager never looks for a driver or browser to download
    made = Browser(machine.ns.name, tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield made
    finally:
        made.quit()
        if saved is None:
            os.environ.pop("SE_OFFLINE", None)
        else:
            os.environ["SE_OFFLINE"] = saved


def url(machine: Machine, path: str = "/ui/") -> str:
    return f"https://127.0.0.1:{machine.port}{path}"


def in_machine(machine: Machine, fn, *args, **kwargs):
    return call_in_netns(machine.ns.name, lambda: fn(*args, **kwargs))


def reachable_pods(snap: dict, service: str) -> set[str]:
    """The Pods the drawn edges lead to from ``service`` (Service -> slice -> endpoint -> Pod)."""
    frontier, seen = {service}, set()
    while frontier:
        here = frontier.pop()
        seen.add(here)
        frontier |= {b for a, b in snap["edges"] if a == here and b not in seen and not b.startswith("node/")}
    return {n for n in seen if n.startswith("pod/")}


def test_unauthenticated_access_is_a_401(machine):
    ca = str(machine.data_dir / "pki" / "ca.crt")
    for path, accept in (("/ui/", "application/json"), ("/ui/api/map", "application/json"), ("/ui/", "text/html")):
        response = in_machine(machine, requests.get, url(machine, path), headers={"Accept": accept}, verify=ca, timeout=30)
        assert response.status_code == 401, (path, accept)
        if accept == "application/json":
            assert (response.json()["kind"], response.json()["reason"]) == ("Status", "Unauthorized")


def test_the_map_shows_the_examples_and_follows_readiness_live(machine, browser, tmp_path):
    token = machine.kubectl("create", "token", "map-viewer").stdout.strip()
    browser.get(url(machine))
    browser.wait_for("return !document.getElementById('login').hidden", "the 401 page asking for a token")
    browser.js("document.getElementById('token').value = arguments[0];"
               "document.getElementById('login-form').requestSubmit();", token)

    dns_pods = {f"pod/kube-system/{p['metadata']['name']}" for p in machine.get("pods", "-n", "kube-system", "-l", "k8s-app=kube-dns")["items"]}
    expected = {**EXAMPLE_PODS, "service/kube-system/kube-dns": dns_pods}

    def all_shown_and_ready(snap):
        return all(reachable_pods(snap, svc) == pods and all(snap["boxes"].get(p, {}).get("state") == "ready" for p in pods)
                   for svc, pods in expected.items())

    snap = browser.until(all_shown_and_ready, "every example Service with its Pods, all ready")
    for svc in expected:
        assert snap["boxes"][svc]["state"] == "ready"
    assert snap["boxes"]["node/" + machine.get("nodes")["items"][0]["metadata"]["name"]]["state"] == "ready"  # proxy healthy
    ready_fill = snap["boxes"]["pod/default/backend-2"]["fill"]

    browser.js("window.__notReloaded = 'still the same page';")
    pod_ip = machine.get("pod", "backend-2")["status"]["podIP"]
    answer = in_machine(machine, requests.post, f"http://{pod_ip}:9376/unready", timeout=30)
    assert answer.text == "backend-2 readiness: False\n"
    snap = browser.until(lambda s: s["boxes"].get("pod/default/backend-2", {}).get("state") == "not-ready",
                         "backend-2 drawn not ready after its probe fails")
    assert snap["marker"] == "still the same page"  # updated by watch, not by a reload
    assert snap["boxes"]["pod/default/backend-2"]["fill"] != ready_fill
    assert snap["boxes"]["pod/default/backend-1"]["fill"] == ready_fill
    browser.until(lambda s: any(s["boxes"][a]["state"] == "not-ready" for a, b in s["edges"]
                                if b == "pod/default/backend-2" and a.startswith("endpoint/default/my-service-")),
                  "backend-2's endpoint of my-service drawn not ready")

    browser.js("document.querySelector('#map g.box[data-id=\"service/default/my-service\"]')"
               ".dispatchEvent(new MouseEvent('click', {bubbles: true}));")
    explain = browser.wait_for("const t = document.getElementById('panel-explain').textContent; return t.includes('backend-2') && t",
                               "kubesvc explain's findings for my-service")
    trace = browser.wait_for("const t = document.getElementById('panel-trace').textContent; return t.includes('Service port:') && t",
                             "kubesvc trace's walk to my-service")
    assert "fails its readiness probe" in explain
    assert "delivered to one of:" in trace

    png = browser.call(browser.driver.get_screenshot_as_png)
    shot = tmp_path / "service-map.png"
    shot.write_bytes(png)
    width, height, colours = png_colours(png)
    assert width >= 1000 and height >= 700, (width, height)
    assert len(colours) >= 8, f"the screenshot looks blank: {len(colours)} colours"
    if os.environ.get("KUBESVC_UI_SCREENSHOT"):
        shutil.copyfile(shot, os.environ["KUBESVC_UI_SCREENSHOT"])


def png_colours(data: bytes, rows: int = 400) -> tuple[int, int, set[bytes]]:
    """Width, height and the distinct pixel values in the top ``rows`` rows (the header, the legend
    and the first boxes) of an 8-bit RGB or RGBA PNG (zlib and the five PNG row filters, from the
    PNG specification; no image library needed)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
    width, height, depth, colour_type, _, _, interlace = header
    assert depth == 8 and colour_type in (2, 6) and interlace == 0, header
    bpp = 3 if colour_type == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    previous = bytearray(stride)
    colours: set[bytes] = set()
    for y in range(min(height, rows)):
        filt, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up = previous[i]
            corner = previous[i - bpp] if i >= bpp else 0
            if filt == 1:
                line[i] = (line[i] + left) & 0xFF
            elif filt == 2:
                line[i] = (line[i] + up) & 0xFF
            elif filt == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif filt == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        if y % 4 == 0:  # a sample of rows is plenty to tell a picture from a blank page
            colours.update(bytes(line[x:x + bpp]) for x in range(0, stride, bpp * 4))
        previous = line
    return width, height, colours
