// The console's campaign view: `fleet campaign status` for the campaign the open wave carries out.
// Read-only. Independent of console.js: it follows the wave picker's value and asks
// /api/console/waves/{wave}/campaign every 2 s while the wave is a campaign's (every 15 s when it
// is not; at once when the wave changes). Everything reaches the DOM through textContent.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const enc = encodeURIComponent;
  const C = { wave: null, due: 0, busy: false, notesOf: null };

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  async function get(path) {
    const r = await fetch(path, { credentials: "same-origin" });
    let data = null;
    try { data = await r.json(); } catch (_) { data = null; }
    if (!r.ok) {
      const err = new Error((data && data.error && data.error.message) || `${r.status} ${r.statusText}`);
      err.status = r.status;
      throw err;
    }
    return data;
  }

  function hide() {
    const panel = $("campaign");
    panel.hidden = true;
    delete panel.dataset.campaign;
  }

  function render(v) {
    const s = v.state;
    const panel = $("campaign");
    panel.dataset.campaign = v.campaign_id;
    panel.dataset.waveStatus = s.wave_status;
    const model = s.executor_model || "default model";
    $("campaign-head").textContent =
      `campaign ${v.campaign_id} · plan ${s.plan_source} · executor ${s.executor_agent || "default"} (${model})` +
      ` · ${v.done}/${v.total} waves done`;
    const strip = [`loop ${s.loop_state}` + (v.loop.running ? "" : " (no loop process)"),
      `wave ${s.current_wave} ${s.wave_status}`];
    if (s.retry_count) strip.push(`retry ${s.retry_count}`);
    if (s.verify_count) strip.push(`verify ${s.verify_count}`);
    if (s.active_session_id) strip.push(`active ${v.loop.participant || s.active_session_id} [${s.active_session_kind}]`);
    $("campaign-strip").textContent = strip.join(" · ");
    const error = $("campaign-error");
    error.hidden = !v.loop.error;
    error.textContent = v.loop.error ? `loop error: ${v.loop.error}` : "";
    const att = $("campaign-attention");
    att.replaceChildren();
    att.hidden = !v.attention;
    if (v.attention) {
      att.append(el("div", "question", "USER ATTENTION NEEDED: " + (v.attention.question || "(no summary)")));
      if (v.attention.wavelet) {
        att.append(el("div", "hint", `answer in the session's wavelet ${v.attention.wavelet} (the composer, or ` +
          `${v.attention.answer_with})`));
      }
      att.append(el("div", "hint", `or dismiss the question: ${v.attention.dismiss_with}`));
    }
    const body = $("campaign-waves").tBodies[0];
    body.replaceChildren();
    for (const r of v.rows) {
      const tr = el("tr");
      tr.dataset.wave = String(r.wave);
      const base = (r.status || "").split(" ")[0];
      tr.append(el("td", null, r.wave), el("td", `status st-${base || "none"}`, r.status || "-"),
        el("td", "mono", r.session || "-"), el("td", "mono", r.commit || "-"), el("td", null, r.title || "-"));
      const notes = el("td", null, r.notes || "");
      if (r.has_notes) {
        const b = el("button", "link notes-button", "NOTES.md");
        b.type = "button";
        b.addEventListener("click", () => toggleNotes(r.wave));
        notes.append(" ", b);
      }
      tr.append(notes);
      body.append(tr);
    }
    panel.hidden = false;
  }

  async function toggleNotes(n) {
    const pre = $("campaign-notes");
    if (C.notesOf === n && !pre.hidden) {
      pre.hidden = true;
      C.notesOf = null;
      return;
    }
    const wave = C.wave;
    try {
      const got = await get(`/api/console/waves/${enc(wave)}/campaign/notes/${n}`);
      if (C.wave !== wave) return;
      pre.textContent = got.text || `wave ${n} has no NOTES.md yet`;
      pre.dataset.wave = String(n);
      C.notesOf = n;
      pre.hidden = false;
    } catch (e) {
      pre.textContent = e.message;
      pre.hidden = false;
    }
  }

  async function refresh(wave) {
    C.busy = true;
    try {
      const v = await get(`/api/console/waves/${enc(wave)}/campaign`);
      if (C.wave !== wave) return;
      render(v);
      C.due = Date.now() + 2000;
    } catch (e) {
      if (C.wave !== wave) return;
      if (e.status === 404) {
        hide();
      } else if (e.status !== 401) {
        $("campaign-error").hidden = false;
        $("campaign-error").textContent = e.message;
      }
      C.due = Date.now() + (e.status === 404 ? 15000 : 5000);
    } finally {
      C.busy = false;
    }
  }

  function tick() {
    const wave = $("wave-select").value || null;
    if (wave !== C.wave) {
      C.wave = wave;
      C.notesOf = null;
      $("campaign-notes").hidden = true;
      hide();
      C.due = 0;
    }
    if (wave && !C.busy && Date.now() >= C.due && document.visibilityState !== "hidden") refresh(wave);
  }

  document.addEventListener("DOMContentLoaded", () => {
    if (!$("campaign")) return;
    $("wave-select").addEventListener("change", tick);
    setInterval(tick, 500);
    tick();
  });
})();
