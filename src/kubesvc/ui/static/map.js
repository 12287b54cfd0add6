// The Service map page: draws what /ui/api/map returns (kubesvc.ui.graph builds it) and asks for it
// again when a watch on Services, EndpointSlices, Pods or Nodes reports a change. The bearer token
// lives in sessionStorage and travels only in an Authorization header; a browser holding a client
// certificate the apiserver trusts sends it on these same-origin requests and needs no token.
"use strict";
(function () {
  const TOKEN_KEY = "kubesvc-ui-token";
  const WATCHED = ["/api/v1/services", "/apis/discovery.k8s.io/v1/endpointslices", "/api/v1/pods", "/api/v1/nodes"];
  const COLUMN_WIDTH = 230, BOX_WIDTH = 210, LAST_BOX_WIDTH = 290, ROW_HEIGHT = 70, BOX_HEIGHT = 63, TOP = 6;
  const width = (box) => (box.column === 4 ? LAST_BOX_WIDTH : BOX_WIDTH);
  const room = (box) => Math.floor(width(box) / 6.2);  // characters of 11px text that fit
  const SVG = "http://www.w3.org/2000/svg";
  const $ = (id) => document.getElementById(id);
  let selected = null, refreshTimer = null, watching = false, generation = 0;

  function headers() {
    const token = sessionStorage.getItem(TOKEN_KEY);
    return token ? { Authorization: "Bearer " + token } : {};
  }

  async function get(path) {
    const response = await fetch(path, { headers: headers(), credentials: "same-origin", cache: "no-store" });
    if (response.status === 401) { showLogin("the token was not accepted (401)"); throw new Error("401"); }
    const body = await response.json();
    if (!response.ok) throw new Error(body.message || response.statusText);
    return body;
  }

  function showLogin(message) {
    generation++;  // stops the watches of the previous token
    watching = false;
    if (message && sessionStorage.getItem(TOKEN_KEY)) $("login-error").textContent = message;
    sessionStorage.removeItem(TOKEN_KEY);
    $("login").hidden = false; $("main").hidden = true; $("logout").hidden = true;
    $("status").textContent = "not signed in";
  }

  function el(name, attrs, text) {
    const node = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function fit(text, room) {  // SVG text does not wrap or clip: the whole line is in the box's tooltip
    return text.length > room ? text.slice(0, room - 1) + "…" : text;
  }

  function position(box) {
    return { x: 4 + box.column * COLUMN_WIDTH, y: TOP + box.row * ROW_HEIGHT };
  }

  function draw(map) {
    const svg = $("map");
    svg.replaceChildren();
    svg.setAttribute("width", 4 * COLUMN_WIDTH + LAST_BOX_WIDTH + 8);
    svg.setAttribute("height", TOP + Math.max(map.rows, 1) * ROW_HEIGHT);
    const byId = new Map(map.boxes.map((b) => [b.id, b]));
    for (const edge of map.edges) {
      const a = byId.get(edge.from), b = byId.get(edge.to);
      if (!a || !b) continue;
      const pa = position(a), pb = position(b);
      svg.appendChild(el("line", { x1: pa.x + width(a), y1: pa.y + BOX_HEIGHT / 2, x2: pb.x, y2: pb.y + BOX_HEIGHT / 2,
                                   "data-from": edge.from, "data-to": edge.to }));
    }
    for (const box of map.boxes) {
      const p = position(box);
      const g = el("g", { class: `box kind-${box.kind} state-${box.state}` + (box.id === selected ? " selected" : ""),
                          "data-id": box.id, "data-state": box.state, transform: `translate(${p.x},${p.y})` });
      g.appendChild(el("title", {}, [box.label, ...box.details].join("\n")));
      g.appendChild(el("rect", { width: width(box), height: BOX_HEIGHT }));
      g.appendChild(el("text", { x: 6, y: 15, class: "label" }, fit(box.label, room(box) - 6)));
      (box.details || []).slice(0, 3).forEach((line, i) => g.appendChild(el("text", { x: 6, y: 30 + 13 * i }, fit(line, room(box)))));
      if (box.kind === "service") g.addEventListener("click", () => select(box));
      svg.appendChild(g);
    }
    if (selected && byId.has(selected)) showTraffic(byId.get(selected));
  }

  function showTraffic(box) {
    $("panel-traffic").textContent = box.details.join(" · ");
  }

  async function select(box) {
    selected = box.id;
    document.querySelectorAll("#map .box.selected").forEach((g) => g.classList.remove("selected"));
    document.querySelector(`#map .box[data-id="${CSS.escape(box.id)}"]`)?.classList.add("selected");
    $("panel").hidden = false;
    $("panel-title").textContent = "Service " + box.label;
    showTraffic(box);
    $("panel-explain").textContent = "asking…";
    $("panel-trace").textContent = "asking…";
    const query = `namespace=${encodeURIComponent(box.namespace)}&name=${encodeURIComponent(box.name)}`;
    get("/ui/api/explain?" + query).then((r) => { $("panel-explain").textContent = r.lines.join("\n"); })
      .catch((e) => { $("panel-explain").textContent = "cannot explain: " + e.message; });
    get("/ui/api/trace?" + query).then((r) => { $("panel-trace").textContent = r.error || r.lines.join("\n"); })
      .catch((e) => { $("panel-trace").textContent = "cannot trace: " + e.message; });
  }

  async function refresh() {
    refreshTimer = null;
    try {
      draw(await get("/ui/api/map"));
      $("status").textContent = `updated ${new Date().toLocaleTimeString()}` + (watching ? ", watching" : "");
    } catch (e) {
      if (e.message !== "401") $("status").textContent = "cannot read the map: " + e.message;
    }
  }

  function soon() {
    if (refreshTimer === null) refreshTimer = setTimeout(refresh, 150);
  }

  async function watch(path, mine) {
    // A watch with no resourceVersion starts with the current objects, so a reconnect misses nothing.
    while (mine === generation) {
      try {
        const response = await fetch(path + "?watch=1", { headers: headers(), credentials: "same-origin", cache: "no-store" });
        if (response.status === 401) { showLogin("the token was not accepted (401)"); return; }
        if (!response.ok) throw new Error(response.statusText);
        const reader = response.body.getReader();
        for (;;) {
          const { done } = await reader.read();
          if (done || mine !== generation) break;
          soon();
        }
      } catch (e) {
        $("status").textContent = "watch interrupted, reconnecting: " + e.message;
      }
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  }

  async function start() {
    try {
      await get("/ui/api/map");
    } catch (e) {
      if (e.message !== "401") $("status").textContent = "cannot read the map: " + e.message;
      return;
    }
    $("login").hidden = true; $("main").hidden = false;
    $("logout").hidden = !sessionStorage.getItem(TOKEN_KEY);
    const mine = ++generation;
    watching = true;
    WATCHED.forEach((path) => watch(path, mine));
    await refresh();
  }

  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const token = $("token").value.trim();
    if (!token) return;
    sessionStorage.setItem(TOKEN_KEY, token);
    $("token").value = "";
    $("login-error").textContent = "";
    start();
  });
  $("logout").addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); showLogin(""); });
  setInterval(() => { if (watching) soon(); }, 5000);  // proxy health and last sync change without an API event
  start();
})();
