// The fleet operator console. Plain script, no build step, no dependencies.
//
// Rules this file keeps:
// - Every piece of data reaches the DOM through textContent (or as an attribute value through the
//   DOM API), never through innerHTML: a blip containing markup renders as text.
// - One EventSource per open wave. Blip events carry their blip id as the event id, so the browser's
//   automatic reconnect (Last-Event-ID) misses nothing; when the browser gives up, we reopen with
//   ?after=<the last id we saw>.
// - The transcript renders the tail of a wavelet and pages older history in on scroll up.
"use strict";

(() => {
  const PAGE = 200;
  const $ = (id) => document.getElementById(id);
  const enc = encodeURIComponent;

  const S = {
    waves: [],
    waveRef: null, // the wave name the stream is open on
    wave: null, // the Wave (with wavelets and rosters) from the latest tree event
    es: null,
    cursor: null, // the last blip id the stream delivered
    wavelet: null, // the selected wavelet id
    want: null, // a wavelet (name or id) to select once the tree knows it
    gen: 0, // bumped on every wavelet switch: late answers for an older selection are dropped
    loading: false,
    pending: [],
    rendered: new Map(), // blip id -> element, for the selected wavelet
    oldest: null,
    more: false,
    loadingOlder: false,
    unread: new Map(),
    presence: new Map(),
    waiting: new Map(),
    usage: new Map(), // participant -> its usage totals (fleet usage)
    pricesFile: "", // the user's own price table (fleet usage: prices_file), named where a cost is unknown
    held: new Map(), // participant -> the budget that holds its deliveries (docs/budgets.md)
    mention: { items: [], index: 0 },
  };

  // ------------------------------------------------------------------ small helpers

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  let statusTimer = null;
  function status(message, isError) {
    const s = $("status");
    s.textContent = message || "";
    s.classList.toggle("error", !!isError);
    clearTimeout(statusTimer);
    if (message) statusTimer = setTimeout(() => { s.textContent = ""; }, isError ? 8000 : 3000);
  }

  function setConn(state) {
    const c = $("conn");
    c.textContent = state;
    c.dataset.state = state;
  }

  // The daemon's routes by name (FLEET_ROUTES: /assets/routes.js, generated from fleet/routes.py):
  // the page writes no API path of its own, so a route moved in the table moves here too.
  async function call(name, args, body) {
    const r = window.FLEET_ROUTES && window.FLEET_ROUTES[name];
    if (!r) return Promise.reject(new Error(`the console knows no route ${name}: reload the page`));
    const path = r.path.replace(/\{(\w+)\}/g, (_, k) => {
      if (args[k] === undefined) throw new Error(`route ${name} needs ${k}`);
      return enc(args[k]);
    });
    return api(r.method, path, body);
  }

  async function api(method, path, body) {
    const init = { method, credentials: "same-origin", headers: {} };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const r = await fetch(path, init);
    if (r.status === 401) {
      location.reload(); // the login page
      throw new Error("logged out");
    }
    let data = null;
    try { data = await r.json(); } catch (_) { data = null; }
    if (!r.ok) {
      throw new Error((data && data.error && data.error.message) || `${r.status} ${r.statusText}`);
    }
    return data;
  }

  function hue(name) {
    let h = 0;
    for (const ch of name) h = (h * 31 + ch.codePointAt(0)) % 360;
    return h;
  }

  function fmtTime(iso) {
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return iso;
    const today = new Date();
    const hm = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
    if (d.toDateString() === today.toDateString()) return hm;
    return `${d.toLocaleDateString([], { month: "short", day: "numeric" })} ${hm}`;
  }

  function waveletById(id) {
    return S.wave ? S.wave.wavelets.find((w) => w.id === id) || null : null;
  }

  // Mentions (@name, [[name]]) are highlighted; everything is still a text node.
  const MENTION = /(@[a-z][a-z0-9_-]{0,31}|\[\[[a-z][a-z0-9_-]{0,31}\]\])/g;
  function renderText(node, text) {
    let last = 0;
    for (const m of text.matchAll(MENTION)) {
      if (m.index > last) node.append(document.createTextNode(text.slice(last, m.index)));
      node.append(el("span", "mention", m[0]));
      last = m.index + m[0].length;
    }
    if (last < text.length) node.append(document.createTextNode(text.slice(last)));
  }

  // ------------------------------------------------------------------ waves and the stream

  async function loadWaves() {
    const data = await call("list_waves", {});
    const same = data.waves.map((w) => w.name).join("/") === S.waves.map((w) => w.name).join("/");
    S.waves = data.waves;
    const sel = $("wave-select");
    if (same && sel.options.length) return; // rebuilding would close an open menu for nothing
    sel.replaceChildren();
    for (const w of S.waves) {
      const o = el("option", null, w.name);
      o.value = w.name;
      sel.append(o);
    }
    if (S.waveRef) sel.value = S.waveRef;
  }

  function parseHash() {
    const m = /^#\/([^/]+)(?:\/([^/]+))?/.exec(location.hash);
    if (!m) return [null, null];
    return [decodeURIComponent(m[1]), m[2] ? decodeURIComponent(m[2]) : null];
  }

  function openWave(name, wantWavelet) {
    if (S.es) S.es.close();
    const fresh = name !== S.waveRef;
    S.waveRef = name;
    if (fresh) {
      S.wave = null;
      S.cursor = null;
      S.wavelet = null;
      S.unread.clear();
      S.presence.clear();
      S.waiting.clear();
      S.usage.clear();
      S.want = wantWavelet || null;
      $("blips").replaceChildren();
      S.rendered.clear();
    }
    $("wave-select").value = name;
    const url = `/api/console/waves/${enc(name)}/events` + (S.cursor ? `?after=${enc(S.cursor)}` : "");
    const es = new EventSource(url);
    S.es = es;
    setConn("connecting…");
    const mine = (fn) => (e) => { if (S.es === es) fn(e); };
    es.addEventListener("ready", mine((e) => { S.cursor = JSON.parse(e.data).cursor || S.cursor; }));
    es.addEventListener("tree", mine((e) => onTree(JSON.parse(e.data))));
    es.addEventListener("presence", mine((e) => onPresence(JSON.parse(e.data).presence)));
    es.addEventListener("permissions", mine((e) => onPermissions(JSON.parse(e.data).requests)));
    es.addEventListener("blip", mine((e) => onBlip(JSON.parse(e.data))));
    es.onopen = mine(() => {
      setConn("live");
      S.waiting.clear(); // each connection starts with nothing waiting: the stream says what does
      renderPresence();
    });
    es.onerror = mine(() => {
      if (es.readyState !== EventSource.CLOSED) {
        setConn("reconnecting…");
        return;
      }
      // The browser gave up (an error answer): find out whether we are still logged in, then retry.
      setConn("offline");
      call("whoami", {}).then(
        () => setTimeout(() => { if (S.es === es) openWave(name); }, 2000),
        () => setTimeout(() => { if (S.es === es) openWave(name); }, 5000),
      );
    });
  }

  function onTree(wave) {
    S.wave = wave;
    renderTree();
    if (S.want) {
      const want = S.want;
      S.want = null; // asked for once: a wavelet of that name created later must not steal the view
      const w = wave.wavelets.find((x) => x.id === want || x.name === want);
      if (w) {
        selectWavelet(w.id);
        return;
      }
    }
    if (!S.wavelet || !waveletById(S.wavelet)) {
      selectWavelet(wave.root_id);
    } else {
      renderHead();
    }
  }

  // The prompts agents wait at (docs/permissions.md): a badge and Allow/Deny on the agent's row,
  // the count in the page title, and a browser notification for each new one.
  function onPermissions(requests) {
    const before = S.waiting;
    S.waiting = new Map();
    for (const r of requests) if (!S.waiting.has(r.participant)) S.waiting.set(r.participant, r);
    document.title = (S.waiting.size ? `(${S.waiting.size} waiting) ` : "") +
      document.title.replace(/^\(\d+ waiting\) /, "");
    renderPresence();
    for (const r of S.waiting.values()) {
      if (![...before.values()].some((b) => b.id === r.id)) notifyWaiting(r);
    }
  }

  function notifyWaiting(r) {
    if (typeof window.Notification !== "function") return; // no notifications here: the badge says it
    const show = () => new Notification(`fleet: ${r.participant} waits for permission`, {
      body: `${r.tool} (${r.preview})`, tag: r.id,
    });
    if (Notification.permission === "granted") show();
    else if (Notification.permission !== "denied") Notification.requestPermission().then((p) => p === "granted" && show());
  }

  async function answerPermission(r, behavior) {
    try {
      await call("answer_permission", { wave: S.waveRef },
        { participant: r.participant, request_id: r.id, behavior, via: "console" });
      status(`${r.participant}: ${r.tool} ${behavior === "allow" ? "allowed" : "denied"}`);
    } catch (e) {
      status(e.message, true);
    }
  }

  function onPresence(rows) {
    S.presence = new Map(rows.map((r) => [r.participant, r]));
    renderPresence();
    renderRoster();
    refreshUsage();
  }

  function spentText(f) {
    const n = f.tokens;
    const t = n < 1000 ? String(n) : n < 1e6 ? `${(n / 1000).toFixed(1)}k` : `${(n / 1e6).toFixed(2)}M`;
    return `${t} tok · ${f.cost_usd === null ? "$?" : "$" + f.cost_usd.toFixed(4)}`;
  }

  async function refreshUsage() {
    const ref = S.waveRef;
    if (!ref) return;
    try {
      const u = await api("GET", `/api/console/waves/${enc(ref)}/usage`);
      if (S.waveRef !== ref) return;
      S.usage = new Map(u.participants.map((p) => [p.participant, p.total]));
      S.pricesFile = u.prices_file || "";
      S.held = new Map();
      for (const b of u.budgets || []) {
        const limit = b.tokens !== null ? `${b.tokens} tokens` : `$${b.cost}`;
        for (const s of b.spent) if (s.reached) S.held.set(s.participant, `${limit} in ${b.wavelet || u.wave}`);
      }
      renderPresence();
    } catch (_) { /* usage is a nicety: presence stays as it is */ }
  }

  function onBlip(b) {
    S.cursor = b.id;
    if (b.wavelet_id !== S.wavelet) {
      if (b.kind !== "system" && !b.superseded_by) {
        S.unread.set(b.wavelet_id, (S.unread.get(b.wavelet_id) || 0) + 1);
        renderUnread(b.wavelet_id);
      }
      return;
    }
    if (S.loading) {
      S.pending.push(b);
      return;
    }
    showBlip(b);
  }

  // ------------------------------------------------------------------ the tree

  function renderUnread(id) {
    // In place: the row a pointer may be pressing stays the element it is (rebuilt between a press
    // and its release, the click would be lost).
    const row = [...document.querySelectorAll("#tree .tree-row")].find((r) => r.dataset.id === id);
    if (!row) return renderTree();
    const n = S.unread.get(id);
    let badge = row.querySelector(".unread");
    if (!n) return badge && badge.remove();
    if (!badge) {
      badge = el("span", "unread");
      row.querySelector(".tree-roster").before(badge);
    }
    badge.textContent = String(n);
  }

  function renderTree() {
    const nav = $("tree");
    nav.replaceChildren();
    if (!S.wave) return;
    // A wavelet whose parent the reader may not see (parent_withheld: a private wavelet it is not
    // on; or a parent id that is not in the tree) hangs under one "private wavelet" placeholder,
    // after the root: it still appears, and nothing of the parent is shown or asked for.
    const known = new Set(S.wave.wavelets.map((w) => w.id));
    const HIDDEN = "\u0000hidden";
    const kids = new Map();
    for (const w of S.wave.wavelets) {
      const hidden = w.parent_withheld || (w.parent_id && !known.has(w.parent_id));
      const k = hidden ? HIDDEN : w.parent_id || "";
      if (!kids.has(k)) kids.set(k, []);
      kids.get(k).push(w);
    }
    const list = el("ul", "tree-list");
    const walk = (parent, depth) => {
      for (const w of kids.get(parent) || []) {
        const li = el("li");
        const row = el("button", "tree-row");
        row.type = "button";
        row.dataset.id = w.id;
        row.dataset.name = w.name;
        row.style.setProperty("--depth", String(depth));
        if (w.id === S.wavelet) row.classList.add("selected");
        row.append(el("span", "hash", "#"), el("span", "name", w.name));
        if (w.private) {
          const p = el("span", "badge private", "private");
          p.title = "private: only its roster can see it";
          row.append(p);
        }
        if (w.topic) {
          const t = el("span", "tree-topic", w.topic);
          t.title = w.topic;
          row.append(t);
        }
        const n = S.unread.get(w.id);
        if (n) row.append(el("span", "unread", n));
        const roster = el("span", "tree-roster", w.roster.map((m) => m.name).join(", ") || "nobody");
        row.append(roster);
        row.addEventListener("click", () => selectWavelet(w.id));
        li.append(row);
        list.append(li);
        walk(w.id, depth + 1);
      }
    };
    walk("", 0);
    if (kids.has(HIDDEN)) {
      const li = el("li", "tree-hidden");
      const row = el("div", "tree-row placeholder");
      row.style.setProperty("--depth", "0");
      row.title = "a private wavelet you are not on: its forks below are shown, it is not";
      row.append(el("span", "hash", "#"), el("span", "name", "a private wavelet"));
      li.append(row);
      list.append(li);
      walk(HIDDEN, 1);
    }
    nav.append(el("h2", null, "wavelets"), list);
  }

  // ------------------------------------------------------------------ the selected wavelet

  function renderHead() {
    const w = waveletById(S.wavelet);
    if (!w) return;
    const path = [];
    let top = w;
    for (let x = w; x; x = x.parent_id ? waveletById(x.parent_id) : null) {
      path.unshift(x.name);
      top = x;
    }
    if (top.parent_withheld || (top.parent_id && !waveletById(top.parent_id))) path.unshift("(a private wavelet)");
    $("wavelet-private").hidden = !w.private;
    $("wavelet-title").textContent = `${S.wave.name} / ${path.join(" › ")}`;
    $("wavelet-topic").textContent = w.topic || "";
    $("wavelet-topic").hidden = !w.topic;
    $("surface-button").disabled = !w.parent_id;
    $("surface-button").title = w.parent_id
      ? "post a conclusion into the parent wavelet"
      : w.parent_withheld
        ? "its parent is a private wavelet you are not on"
        : "the root has no parent";
    document.body.dataset.wavelet = w.id;
    renderRoster();
  }

  function renderRoster() {
    const w = waveletById(S.wavelet);
    const box = $("roster");
    box.replaceChildren();
    if (!w) return;
    for (const m of w.roster) {
      const chip = el("span", "chip");
      chip.dataset.name = m.name;
      const state = m.name === "operator" ? "human" : kindOf(S.presence.get(m.name));
      const dot = el("span", `dot ${state}`);
      dot.title = state;
      chip.append(dot, el("span", "chip-name", m.name));
      const x = el("button", "chip-leave", "×");
      x.type = "button";
      x.title = `take ${m.name} off the roster`;
      x.addEventListener("click", () => leave(chip, x, m.name));
      chip.append(x);
      box.append(chip);
    }
    if (!w.roster.length) box.append(el("span", "muted", "nobody on the roster"));
  }

  async function selectWavelet(id) {
    const w = waveletById(id);
    if (!w) return;
    S.wavelet = id;
    const gen = ++S.gen;
    S.rendered.clear();
    $("blips").replaceChildren();
    $("older").textContent = "";
    $("jump").hidden = true;
    S.oldest = null;
    S.more = false;
    S.unread.delete(id);
    closeForms();
    renderTree();
    renderHead();
    history.replaceState(null, "", `#/${enc(S.wave.name)}/${enc(w.name)}`);
    S.loading = true;
    S.pending = [];
    document.body.dataset.loaded = "";
    try {
      const page = await api("GET", `/api/console/wavelets/${enc(id)}/tail?limit=${PAGE}`);
      if (gen !== S.gen) return;
      const frag = document.createDocumentFragment();
      for (const b of page.blips) {
        const node = renderBlip(b);
        S.rendered.set(b.id, node);
        frag.append(node);
      }
      $("blips").append(frag);
      S.oldest = page.blips.length ? page.blips[0].id : null;
      S.more = page.more;
    } catch (e) {
      if (gen === S.gen) status(e.message, true);
    } finally {
      if (gen === S.gen) {
        S.loading = false;
        const pending = S.pending;
        S.pending = [];
        for (const b of pending) showBlip(b);
        renderOlder();
        scrollToBottom();
        document.body.dataset.loaded = id;
        maybeLoadOlder();
      }
    }
  }

  function renderBlip(b) {
    const art = el("article", `blip kind-${b.kind}`);
    art.dataset.id = b.id;
    art.dataset.author = b.author;
    if (b.author === "operator") art.classList.add("by-operator");
    const meta = el("div", "meta");
    if (b.kind !== "system") {
      const who = el("span", "author", b.author);
      who.style.setProperty("--hue", String(hue(b.author)));
      meta.append(who);
    }
    const t = el("time", null, fmtTime(b.created_at));
    t.dateTime = b.created_at;
    t.title = `${b.created_at}  ${b.id}`;
    meta.append(t);
    if (b.kind === "surface") {
      const src = waveletById(b.source_wavelet_id);
      const a = el("button", "link src", `surfaced from #${src ? src.name : "another wavelet"}`);
      a.type = "button";
      if (src) a.addEventListener("click", () => selectWavelet(src.id));
      meta.append(a);
    }
    if (b.replaces) {
      const h = el("button", "link edited", "edited");
      h.type = "button";
      h.title = "show every version";
      h.addEventListener("click", () => toggleHistory(art, b.id));
      meta.append(h);
    }
    const text = el("div", "text");
    renderText(text, b.text);
    art.append(meta, text);
    return art;
  }

  function atBottom() {
    const t = $("transcript");
    return t.scrollHeight - t.scrollTop - t.clientHeight < 40;
  }

  function scrollToBottom() {
    const t = $("transcript");
    t.scrollTop = t.scrollHeight;
    $("jump").hidden = true;
  }

  // A live blip: dedupe, replace an older version in view, insert in id order.
  function showBlip(b) {
    if (S.rendered.has(b.id) || b.superseded_by) return; // a replaced version: its successor follows
    const stick = atBottom();
    if (b.replaces) {
      const old = S.rendered.get(b.replaces);
      if (old) {
        old.remove();
        S.rendered.delete(b.replaces);
      }
    }
    if (S.oldest && b.id < S.oldest) return; // older than what is loaded: paging will bring it
    const node = renderBlip(b);
    const box = $("blips");
    let next = null;
    for (let c = box.lastElementChild; c && c.dataset.id > b.id; c = c.previousElementSibling) next = c;
    box.insertBefore(node, next);
    S.rendered.set(b.id, node);
    if (!S.oldest) S.oldest = b.id;
    if (stick || b.author === "operator") scrollToBottom();
    else $("jump").hidden = false;
  }

  function renderOlder() {
    const o = $("older");
    if (S.more) o.textContent = S.loadingOlder ? "loading older blips…" : "scroll up for older blips";
    else o.textContent = S.oldest ? "the beginning of this wavelet" : "no blips yet";
  }

  async function loadOlder() {
    if (!S.more || S.loadingOlder || S.loading || !S.oldest) return;
    S.loadingOlder = true;
    renderOlder();
    const gen = S.gen;
    try {
      const page = await api(
        "GET", `/api/console/wavelets/${enc(S.wavelet)}/tail?before=${enc(S.oldest)}&limit=${PAGE}`,
      );
      if (gen !== S.gen) return;
      const t = $("transcript");
      const before = t.scrollHeight;
      const frag = document.createDocumentFragment();
      for (const b of page.blips) {
        if (S.rendered.has(b.id)) continue;
        const node = renderBlip(b);
        S.rendered.set(b.id, node);
        frag.append(node);
      }
      $("blips").prepend(frag);
      t.scrollTop += t.scrollHeight - before; // keep what the reader was looking at in place
      if (page.blips.length) S.oldest = page.blips[0].id;
      S.more = page.more;
    } catch (e) {
      status(e.message, true);
    } finally {
      if (gen === S.gen) {
        S.loadingOlder = false;
        renderOlder();
        maybeLoadOlder();
      }
    }
  }

  function maybeLoadOlder() {
    const t = $("transcript");
    if (S.more && (t.scrollTop < 300 || t.scrollHeight <= t.clientHeight)) loadOlder();
  }

  async function toggleHistory(art, id) {
    const open = art.querySelector(".history");
    if (open) {
      open.remove();
      return;
    }
    try {
      const data = await call("history", { blip: id });
      const ol = el("ol", "history");
      for (const v of data.blips) {
        const li = el("li", v.id === id ? "current" : "");
        const m = el("div", "meta");
        m.append(el("span", "author", v.author), el("time", null, fmtTime(v.created_at)));
        const txt = el("div", "text");
        renderText(txt, v.text);
        li.append(m, txt);
        ol.append(li);
      }
      art.append(ol);
    } catch (e) {
      status(e.message, true);
    }
  }

  // ------------------------------------------------------------------ presence

  // What the agent does, as its channel reported it (fleet/agentstate.py); `unknown` says why.
  const WAITS = ["permission", "dialog", "failed"];

  function kindOf(r) {
    return (r && r.agent && r.agent.kind) || "unknown";
  }

  function agentText(a) {
    if (!a) return "unknown (no state reported)";
    const age = a.since ? ` ${ago(a.since)}` : "";
    switch (a.kind) {
      case "turning": {
        const extra = [a.tool, a.woken_by && a.woken_by.length ? `woken by ${a.woken_by.join(", ")}` : ""].filter(Boolean);
        return `turning${age}` + (extra.length ? ` (${extra.join("; ")})` : "");
      }
      case "permission": return `waiting for permission: ${a.tool}` + (a.input ? ` (${a.input})` : "") + age;
      case "dialog": return `waiting at a dialog: ${a.dialog}${age}`;
      case "failed": return `failed: ${a.error}`;
      case "dead": return a.exit ? `dead (${a.exit})` : "dead";
      case "unknown": return a.why ? `unknown (${a.why})` : "unknown";
      default: return `${a.kind}${age}`;
    }
  }

  function ago(t) {
    const s = Math.max(0, Math.round(Date.now() / 1000 - t));
    return s < 120 ? `${s}s` : s < 7200 ? `${Math.floor(s / 60)}m` : `${Math.floor(s / 3600)}h`;
  }

  function renderPresence() {
    const ul = $("presence");
    ul.replaceChildren();
    // an agent that waits on the operator (a permission, a dialog) or failed comes first
    const waits = (r) => (S.waiting.has(r.participant) || WAITS.includes(kindOf(r)) ? 0 : 1);
    const rows = [...S.presence.values()].sort(
      (a, b) => waits(a) - waits(b) || a.participant.localeCompare(b.participant));
    for (const r of rows) {
      const kind = kindOf(r);
      const li = el("li", `presence-row ${kind}` + (WAITS.includes(kind) ? " needs" : ""));
      li.dataset.name = r.participant;
      li.dataset.state = kind;
      li.title = agentText(r.agent);
      const spent = S.usage.get(r.participant);
      const usage = el("span", "usage", spent ? spentText(spent) : "");
      if (spent) usage.title = `${spent.turns} turns, ${spent.input_tokens} in, ${spent.output_tokens} out, ` +
        `${spent.cache_read_tokens} cache read, ${spent.cache_creation_tokens} cache write` +
        (spent.cost_usd === null && (spent.unpriced || []).length
          ? `; cost unknown: no price for ${spent.unpriced.join(", ")} (add it to ${S.pricesFile || "<config>/prices.toml"})`
          : "");
      const held = S.held.get(r.participant);
      const budget = el("span", "budget", held ? "held: budget spent" : "");
      if (held) budget.title = `budget ${held} reached: deliveries wait until the operator raises it (fleet budget set)`;
      li.append(el("span", `dot ${kind}`), el("span", "name", r.participant), usage, budget,
        el("span", "state", agentText(r.agent)));
      const wait = S.waiting.get(r.participant);
      if (wait) {
        li.classList.add("waiting");
        const box = el("div", "permission");
        box.append(el("span", "badge", `waiting for permission: ${wait.tool} (${wait.preview})`));
        for (const [label, behavior] of [["Allow", "allow"], ["Deny", "deny"]]) {
          const b = el("button", `answer ${behavior}`, label);
          b.type = "button";
          b.addEventListener("click", () => answerPermission(wait, behavior));
          box.append(b);
        }
        li.append(box);
      }
      ul.append(li);
    }
    if (!rows.length) ul.append(el("li", "muted", "nobody yet"));
  }

  // ------------------------------------------------------------------ the operator's powers

  function closeForms() {
    for (const f of document.querySelectorAll(".action-form")) f.hidden = true;
  }

  function formValues(form) {
    return Object.fromEntries(new FormData(form).entries());
  }

  async function act(form, fn) {
    const buttons = form.querySelectorAll("button");
    for (const b of buttons) b.disabled = true;
    try {
      await fn(formValues(form));
      form.reset();
      form.hidden = true;
    } catch (e) {
      status(e.message, true);
    } finally {
      for (const b of buttons) b.disabled = false;
    }
  }

  function names(text) {
    return String(text || "").split(/[\s,]+/).map((s) => s.trim().replace(/^@/, "")).filter(Boolean);
  }

  async function leave(chip, button, name) {
    if (!chip.classList.contains("confirm")) {
      chip.classList.add("confirm");
      button.textContent = "remove?";
      setTimeout(() => { chip.classList.remove("confirm"); button.textContent = "×"; }, 4000);
      return;
    }
    try {
      await call("leave", { wavelet: S.wavelet }, { name });
      status(`${name} is off the roster`);
    } catch (e) {
      status(e.message, true);
    }
  }

  function wireForms() {
    for (const b of document.querySelectorAll("#actions button")) {
      b.addEventListener("click", () => {
        const f = $(`form-${b.dataset.form}`);
        const show = f.hidden;
        closeForms();
        f.hidden = !show;
        if (show) f.querySelector("input, textarea").focus();
      });
    }
    for (const c of document.querySelectorAll(".action-form .cancel")) {
      c.addEventListener("click", () => closeForms());
    }
    $("form-fork").addEventListener("submit", (e) => {
      e.preventDefault();
      act(e.target, async (v) => {
        const wl = await call("fork", { wavelet: S.wavelet }, {
          name: v.name.trim(), with: names(v.with), private: v.private === "on",
        });
        S.want = wl.id;
        if (S.wave && !waveletById(wl.id)) S.wave.wavelets.push(wl);
        onTree(S.wave);
        status(`forked ${wl.name}`);
      });
    });
    $("form-invite").addEventListener("submit", (e) => {
      e.preventDefault();
      act(e.target, async (v) => {
        for (const n of names(v.name)) {
          await call("invite", { wavelet: S.wavelet }, { name: n });
        }
        status("invited");
      });
    });
    $("form-surface").addEventListener("submit", (e) => {
      e.preventDefault();
      act(e.target, async (v) => {
        await call("surface", { wavelet: S.wavelet }, { text: v.text });
        status("surfaced into the parent");
      });
    });
  }

  // ------------------------------------------------------------------ the composer

  function mentionAtCaret() {
    const c = $("compose");
    const upto = c.value.slice(0, c.selectionStart);
    const m = /(^|[^\w@])@([a-z0-9_-]*)$/i.exec(upto);
    return m ? { start: upto.length - m[2].length - 1, prefix: m[2].toLowerCase() } : null;
  }

  function candidates(prefix) {
    const all = new Set(S.presence.keys());
    const w = waveletById(S.wavelet);
    if (w) for (const m of w.roster) all.add(m.name);
    all.add("operator");
    return [...all].filter((n) => n.startsWith(prefix)).sort().slice(0, 8);
  }

  function renderMentions() {
    const ul = $("mentions");
    ul.replaceChildren();
    S.mention.items.forEach((name, i) => {
      const li = el("li", i === S.mention.index ? "active" : "");
      li.setAttribute("role", "option");
      li.dataset.name = name;
      const r = S.presence.get(name);
      li.append(el("span", `dot ${r ? kindOf(r) : "human"}`), el("span", "name", name));
      li.addEventListener("mousedown", (e) => {
        e.preventDefault();
        S.mention.index = i;
        acceptMention();
      });
      ul.append(li);
    });
    ul.hidden = S.mention.items.length === 0;
  }

  function updateMentions() {
    const m = mentionAtCaret();
    S.mention.items = m ? candidates(m.prefix) : [];
    S.mention.index = 0;
    renderMentions();
  }

  function acceptMention() {
    const m = mentionAtCaret();
    const name = S.mention.items[S.mention.index];
    if (!m || !name) return;
    const c = $("compose");
    const rest = c.value.slice(c.selectionStart);
    c.value = `${c.value.slice(0, m.start)}@${name} ${rest.replace(/^\s+/, "")}`;
    const caret = m.start + name.length + 2;
    c.setSelectionRange(caret, caret);
    S.mention.items = [];
    renderMentions();
  }

  async function submitPost() {
    const c = $("compose");
    const text = c.value;
    if (!text.trim() || !S.wavelet) return;
    const btn = $("post");
    btn.disabled = true;
    try {
      const b = await call("post", { wavelet: S.wavelet }, { text });
      c.value = "";
      if (b.wavelet_id === S.wavelet && !S.loading) showBlip(b);
    } catch (e) {
      status(e.message, true);
    } finally {
      btn.disabled = false;
      c.focus();
    }
  }

  function wireComposer() {
    const c = $("compose");
    c.addEventListener("input", updateMentions);
    c.addEventListener("click", updateMentions);
    c.addEventListener("blur", () => { S.mention.items = []; renderMentions(); });
    c.addEventListener("keydown", (e) => {
      if (S.mention.items.length) {
        const n = S.mention.items.length;
        if (e.key === "ArrowDown" || e.key === "ArrowUp") {
          S.mention.index = (S.mention.index + (e.key === "ArrowDown" ? 1 : n - 1)) % n;
          renderMentions();
          e.preventDefault();
          return;
        }
        if (e.key === "Enter" || e.key === "Tab") {
          acceptMention();
          e.preventDefault();
          return;
        }
        if (e.key === "Escape") {
          S.mention.items = [];
          renderMentions();
          e.preventDefault();
          return;
        }
      }
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        submitPost();
      }
    });
    $("composer").addEventListener("submit", (e) => {
      e.preventDefault();
      submitPost();
    });
  }

  // ------------------------------------------------------------------ boot

  async function boot() {
    wireForms();
    wireComposer();
    $("transcript").addEventListener("scroll", () => {
      if ($("transcript").scrollTop < 300) loadOlder();
      if (atBottom()) $("jump").hidden = true;
    });
    $("jump").addEventListener("click", scrollToBottom);
    const sel = $("wave-select");
    sel.addEventListener("focus", () => loadWaves().catch((e) => status(e.message, true)));
    sel.addEventListener("change", () => openWave(sel.value, null));
    try {
      await loadWaves();
    } catch (e) {
      status(e.message, true);
      return;
    }
    const [waveName, waveletName] = parseHash();
    const name = waveName && S.waves.some((w) => w.name === waveName) ? waveName : S.waves[0] && S.waves[0].name;
    if (!name) {
      setConn("idle");
      $("wavelet-title").textContent = "No waves yet: create one with `fleet wave new NAME`";
      return;
    }
    openWave(name, waveletName);
  }

  document.addEventListener("DOMContentLoaded", boot);
})();
