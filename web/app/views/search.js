// views/search.js owns the message search. It is loaded on demand (a
// dynamic import from app.js on first use: Ctrl+K, "/" outside a text
// field, or the Search button), so it costs nothing on the first load.
// It is a modal dialog: a query box, the hits newest first — the
// conversation's name, the sender, the time and the text with the matched
// ranges marked — and "More" while the server has more. The server's
// highlights are ranges of code points of the body (docs/protocol.md), so
// the text is cut with Array.from, never by UTF-16 index. Choosing a hit
// opens its conversation at that message (/c/{id}?m=SEQ: the timeline
// reads the page around it, scrolls to it and marks it). Every text is
// rendered as text (dom.js). The last query and its hits stay while the
// page lives, so the dialog opens again where it was.

import { h, clear } from "../dom.js";
import { nameEl, avatarEl } from "../names.js";
import { t, when, errorText } from "../i18n.js";

/** Code points of a long body shown around its first match. */
const SNIPPET = 240;
/** Hits per page. */
const LIMIT = 20;
/** Typing pauses this long before the query is sent (Enter sends at once). */
const DEBOUNCE_MS = 300;

let ui = null; // the dialog of the signed-in session, built on first use

/**
 * openSearch shows the search dialog, its box focused.
 * @param {{client: object, navigate: Function}} ctx
 */
export function openSearch(ctx) {
  if (!ui || ui.client !== ctx.client) {
    if (ui) ui.dialog.remove();
    ui = build(ctx.client);
  }
  if (!ui.dialog.open) ui.dialog.showModal();
  ui.box.focus();
  ui.box.select();
}

/**
 * marked renders a body with its highlights as <mark> elements: text
 * nodes and marks only, never HTML. A body longer than SNIPPET code points
 * is cut around its first highlight, with "…" where text is left out.
 * @param {string} body
 * @param {Array<{start: number, end: number}>} highlights code points, [start, end)
 * @returns {Array<string|HTMLElement>}
 */
export function marked(body, highlights) {
  const cps = Array.from(body);
  const hl = (highlights || []).filter((x) => x.start >= 0 && x.end > x.start && x.end <= cps.length).sort((a, b) => a.start - b.start);
  let from = 0;
  let to = cps.length;
  if (cps.length > SNIPPET) {
    from = Math.max(0, Math.min((hl.length ? hl[0].start : 0) - 40, cps.length - SNIPPET));
    to = from + SNIPPET;
  }
  const out = [];
  if (from > 0) out.push("…");
  let at = from;
  for (const x of hl) {
    const s = Math.max(x.start, at);
    const e = Math.min(x.end, to);
    if (e <= s) continue;
    if (s > at) out.push(cps.slice(at, s).join(""));
    out.push(h("mark", { "data-test": "search-mark" }, cps.slice(s, e).join("")));
    at = e;
  }
  if (at < to) out.push(cps.slice(at, to).join(""));
  if (to < cps.length) out.push("…");
  return out;
}

/** explain says why a search failed, for the status line. */
function explain(e) {
  switch (e.code) {
    case "INVALID_ARGUMENT":
      // The server's detail says what to change (in English: it is the server's).
      return t("chat.searchInvalid", { reason: e.detail || errorText(e) });
    case "NOT_MEMBER":
      return t("chat.searchNotMember");
    case "RATE_LIMITED":
      return t("chat.searchRateLimited");
    case "UNAVAILABLE":
      return t("chat.searchUnavailable");
  }
  return t("chat.searchFailed", { reason: errorText(e) });
}

/** unbalanced reports a query still inside a quoted phrase: typing waits for the closing quote. */
function unbalanced(q) {
  return (q.match(/"/g) || []).length % 2 === 1;
}

function build(client) {
  const box = h("input", {
    type: "search", placeholder: t("chat.searchMessages"), "aria-label": t("chat.searchMessages"), autocomplete: "off",
    enterkeyhint: "search", "data-test": "search-box",
  });
  const status = h("p", { class: "muted search-status", role: "status", "aria-live": "polite", "data-test": "search-status" });
  const list = h("ol", { class: "search-hits", "data-test": "search-results" });
  const more = h("button", { type: "button", class: "search-more hidden", "data-test": "search-more" }, t("chat.more"));
  const form = h("form", { role: "search", class: "search-form" }, box, h("button", { type: "submit", class: "primary" }, t("chat.search")));
  const dialog = h("dialog", { class: "search", "aria-label": t("chat.searchMessages"), "data-test": "search" },
    h("div", { class: "search-head" }, form,
      h("button", { type: "button", "aria-label": t("chat.searchClose"), "data-test": "search-close", on: { click: () => dialog.close() } }, "×")),
    h("p", { class: "muted search-help" }, t("chat.searchHelp")),
    status, list, more);
  const st = { q: "", next: "", run: 0, timer: 0, busy: false };

  async function run(now) {
    clearTimeout(st.timer);
    const q = box.value.trim();
    if (!q) {
      st.run++;
      st.q = st.next = "";
      clear(list);
      status.textContent = "";
      more.classList.add("hidden");
      return;
    }
    if (!now && q === st.q) return;
    const mine = ++st.run;
    st.q = q;
    status.textContent = t("chat.searching");
    let r;
    try {
      r = await client.search(q, { limit: LIMIT });
    } catch (e) {
      if (mine !== st.run) return;
      clear(list);
      st.next = "";
      more.classList.add("hidden");
      status.textContent = explain(e);
      return;
    }
    if (mine !== st.run) return; // a newer query is on its way
    clear(list);
    add(r.hits || []);
    st.next = r.next || "";
    more.classList.toggle("hidden", !st.next);
    status.textContent = list.childElementCount ? "" : t("chat.searchNone");
  }

  async function loadMore() {
    if (!st.next || st.busy) return;
    const mine = st.run;
    st.busy = true;
    more.disabled = true;
    try {
      const r = await client.search(st.q, { limit: LIMIT, cursor: st.next });
      if (mine !== st.run) return;
      add(r.hits || []);
      st.next = r.next || "";
    } catch (e) {
      if (mine === st.run) status.textContent = explain(e);
    } finally {
      st.busy = false;
      more.disabled = false;
      more.classList.toggle("hidden", !st.next);
    }
  }

  function add(hits) {
    for (const hit of hits) list.appendChild(hitEl(hit));
  }

  function hitEl(hit) {
    const ev = hit.ev;
    const c = client.conversation(ev.conv);
    const a = h("a", {
      class: "search-hit", href: "/c/" + encodeURIComponent(ev.conv) + "?m=" + ev.seq, "data-nav": "",
      "data-test": "search-hit", "data-conv": ev.conv, "data-seq": ev.seq,
    },
    h("span", { class: "search-where" },
      h("span", { class: "search-conv", "data-test": "search-conv" }, c ? client.title(c) : ev.conv),
      " · ", avatarEl(h, ev.sender), nameEl(h, ev.sender, { "data-test": "search-sender" }),
      " · ", h("time", { datetime: ev.at }, when(ev.at, "datetime"))),
    h("span", { class: "search-body", "data-test": "search-body" }, marked(ev.body, hit.highlights)));
    return h("li", null, a);
  }

  box.addEventListener("input", () => {
    clearTimeout(st.timer);
    if (!unbalanced(box.value)) st.timer = setTimeout(() => run(false), DEBOUNCE_MS);
  });
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    run(true);
  });
  more.addEventListener("click", loadMore);
  // A plain click on a hit closes the dialog; app.js's link handler then
  // opens the conversation at the message.
  list.addEventListener("click", (e) => {
    if (e.button === 0 && !e.metaKey && !e.ctrlKey && !e.shiftKey && !e.altKey && e.target.closest("a.search-hit")) dialog.close();
  });
  // A click on the backdrop (the dialog itself, outside its content) closes it.
  dialog.addEventListener("click", (e) => {
    if (e.target === dialog) dialog.close();
  });
  // Up and down move between the box and the hits.
  dialog.addEventListener("keydown", (e) => {
    if (e.key !== "ArrowDown" && e.key !== "ArrowUp") return;
    const links = [...list.querySelectorAll("a.search-hit")];
    if (!links.length) return;
    e.preventDefault();
    const i = links.indexOf(document.activeElement);
    const j = e.key === "ArrowDown" ? Math.min(links.length - 1, i + 1) : i - 1;
    if (j < 0) box.focus();
    else links[j].focus();
  });
  document.body.appendChild(dialog);
  return { client, dialog, box };
}
