// views/timeline.js owns one conversation's screen: the timeline and its
// composer. It promises to render incrementally: a new event appends its
// node, an older page prepends its nodes (keeping the scroll position), a
// recall replaces one node; the list is never re-rendered as a whole per
// message, so thousands of loaded messages stay responsive. Bodies are text
// only (dom.js). Older pages load when the user scrolls near the top (or
// presses "Load older"); read marks move when messages are on screen
// (IntersectionObserver) while the page is visible.

import { retryDelay } from "../backoff.js";
import { renderComposer } from "./composer.js";

const dayFmt = new Intl.DateTimeFormat(undefined, { weekday: "short", year: "numeric", month: "short", day: "numeric" });
const timeFmt = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit" });

function dayKey(ev) {
  const d = new Date(ev.at);
  return d.getFullYear() + "-" + d.getMonth() + "-" + d.getDate();
}

/**
 * renderTimeline builds the screen of conversation params.id; the element has dispose().
 * @param {{h: Function, client: object, me: object, toast: Function, navigate: Function}} ctx
 * @param {{id: string}} params
 * @returns {HTMLElement}
 */
export function renderTimeline(ctx, params) {
  const { h, client } = ctx;
  const conv = params.id;
  const me = client.user;
  const nodes = new Map(); // seq → li
  let firstEv = null;
  let lastEv = null;
  let topSep = null;
  let loadingOlder = false;
  let readSeen = 0;
  let readTimer = 0;

  const title = h("h2", { id: "conv-title", "data-test": "conv-title" }, conv);
  const status = h("p", { class: "muted", role: "status", "data-test": "timeline-status" }, "Loading…");
  const olderBtn = h("button", { type: "button", class: "link hidden", "data-test": "load-older", on: { click: () => loadOlder() } }, "Load older messages");
  const list = h("ol", { class: "events", "data-test": "events" });
  const outList = h("ol", { class: "events outgoing", "data-test": "outgoing" });
  const scroller = h("div", {
    class: "timeline", role: "log", "aria-labelledby": "conv-title", tabindex: "0", "data-test": "timeline",
    on: { scroll: onScroll },
  }, h("div", { class: "older" }, olderBtn), status, list, outList);
  const composer = renderComposer(ctx, conv);
  const notMember = h("p", { class: "composer-note muted hidden", role: "status", "data-test": "not-member" },
    "You are no longer a member of this conversation: you can read what you saw, not write.");
  const el = h("section", { class: "conv-view", "aria-labelledby": "conv-title", "data-test": "conv-view", "data-conv": conv },
    h("div", { class: "conv-head" },
      h("a", { class: "back", href: "/", "data-nav": "", "aria-label": "Back to the conversations" }, "←"),
      title,
      h("a", { href: "/c/" + encodeURIComponent(conv) + "/members", "data-nav": "" }, "Members")),
    scroller, notMember, composer);

  const observer = new IntersectionObserver(seen, { root: scroller, threshold: 0.6 });

  function who(user) {
    return user === me ? "You" : user;
  }

  function renderEvent(ev) {
    if (ev.kind === "recall") return null;
    if (ev.kind === "member_joined" || ev.kind === "member_left") {
      const verb = ev.kind === "member_joined" ? "joined" : "left";
      const text = ev.sender && ev.sender !== ev.user
        ? who(ev.sender) + (ev.kind === "member_joined" ? " added " : " removed ") + who(ev.user)
        : who(ev.user) + " " + verb;
      return h("li", { class: "sysline", "data-test": "sys", "data-seq": ev.seq }, text);
    }
    const mine = ev.sender === me;
    const recallBtn = ev.recalled ? null : h("button", {
      type: "button", class: "link", "data-test": "recall", "aria-label": "Recall this message",
      on: { click: () => recall(ev, li) },
    }, "Recall");
    const li = h("li", {
      class: ["msg", mine && "mine"], "data-test": "msg", "data-seq": ev.seq, "data-sender": ev.sender,
      "data-state": mine ? "sent" : false,
    },
    h("div", { class: "who" }, who(ev.sender)),
    ev.recalled
      ? h("div", { class: "recalled-body", "data-test": "recalled" }, "message recalled")
      : h("div", { class: "body", "data-test": "body" }, ev.body),
    h("div", { class: "meta" },
      h("time", { datetime: ev.at }, timeFmt.format(new Date(ev.at))),
      mine ? h("span", { "data-test": "state" }, "sent") : null,
      recallBtn,
      h("span", { class: "error", role: "alert", "data-test": "recall-error" })));
    return li;
  }

  async function recall(ev, li) {
    const err = li.querySelector("[data-test=recall-error]");
    err.textContent = "";
    try {
      await client.recall(conv, ev.seq);
    } catch (e) {
      const why = {
        NOT_SENDER: "Only the sender can recall this message.",
        RECALL_WINDOW_EXPIRED: "Too late: the recall window has passed.",
        ALREADY_RECALLED: "This message was already recalled.",
      }[e.code] || "Recall failed";
      const cur = nodes.get(ev.seq) || li;
      const errEl = cur.querySelector("[data-test=recall-error]");
      if (errEl) errEl.textContent = why + " (" + e.code + ")";
    }
  }

  /** build renders events in order, with a day separator where the day changes (and first). */
  function build(events, prev) {
    const frag = document.createDocumentFragment();
    let first = null;
    let p = prev;
    for (const ev of events) {
      const li = renderEvent(ev);
      if (!li) continue;
      if (!p || dayKey(p) !== dayKey(ev)) {
        const sep = h("li", { class: "day", "aria-hidden": "false" }, dayFmt.format(new Date(ev.at)));
        if (!first) first = sep;
        frag.appendChild(sep);
      }
      frag.appendChild(li);
      nodes.set(ev.seq, li);
      if (li.classList.contains("msg") && ev.sender !== me) observer.observe(li);
      p = ev;
    }
    return { frag, first, last: p };
  }

  function visible(ev) {
    return ev.kind !== "recall";
  }

  function nearBottom() {
    return scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 120;
  }

  function toBottom() {
    scroller.scrollTop = scroller.scrollHeight;
  }

  function reset() {
    const tl = client.timeline(conv);
    nodes.clear();
    observer.disconnect();
    list.replaceChildren();
    firstEv = lastEv = topSep = null;
    if (tl.state === "ready") {
      const evs = [...tl.events.values()].filter(visible).sort((a, b) => a.seq - b.seq);
      const b = build(evs, null);
      list.appendChild(b.frag);
      topSep = b.first;
      firstEv = evs[0] || null;
      lastEv = evs[evs.length - 1] || null;
      status.textContent = evs.length ? "" : "No messages yet.";
    } else if (tl.error) {
      status.textContent = tl.error.code === "NOT_MEMBER"
        ? "You cannot see this conversation (NOT_MEMBER)."
        : "Cannot load the conversation now (" + tl.error.code + "); it loads when the connection is back.";
    } else {
      status.textContent = "Loading…";
    }
    olderBtn.classList.toggle("hidden", !(tl.state === "ready" && tl.hasOlder));
    drawOutgoing();
    toBottom();
    fillUp();
  }

  function append(events) {
    const evs = events.filter(visible);
    if (!evs.length) return;
    const stick = nearBottom();
    const b = build(evs, lastEv);
    list.appendChild(b.frag);
    if (!firstEv) {
      firstEv = evs[0];
      topSep = b.first;
    }
    lastEv = b.last;
    status.textContent = "";
    drawOutgoing();
    if (stick) toBottom();
  }

  function prepend(events) {
    const tl = client.timeline(conv);
    olderBtn.classList.toggle("hidden", !tl.hasOlder);
    const evs = events.filter(visible);
    if (!evs.length) return;
    const before = scroller.scrollHeight;
    const b = build(evs, null);
    if (topSep && firstEv && dayKey(b.last) === dayKey(firstEv)) topSep.remove();
    list.insertBefore(b.frag, list.firstChild);
    topSep = b.first;
    firstEv = evs[0];
    if (!lastEv) lastEv = b.last;
    status.textContent = "";
    scroller.scrollTop += scroller.scrollHeight - before;
  }

  function update(ev) {
    const old = nodes.get(ev.seq);
    if (!old) return;
    const li = renderEvent(ev);
    old.replaceWith(li);
    observer.unobserve(old);
    nodes.set(ev.seq, li);
  }

  function drawOutgoing() {
    const rows = [];
    for (const it of client.outgoing(conv)) {
      let state;
      let actions = [];
      switch (it.state) {
        case "pending":
          state = h("span", { class: "state-sending", "data-test": "state" }, "sending…");
          break;
        case "sent":
          state = h("span", { "data-test": "state" }, "sent");
          break;
        case "expired":
          state = h("span", { "data-test": "state" }, "sent, expired");
          actions = [h("button", { type: "button", class: "link", on: { click: () => client.dismiss(it.cmid) } }, "Dismiss")];
          break;
        default:
          state = h("span", { class: "state-failed", "data-test": "state" }, "failed: " + (it.reason || "refused"));
          actions = [
            h("button", {
              type: "button", class: "link", "data-test": "edit-resend",
              on: { click: () => { composer.setText(it.body); client.dismiss(it.cmid); } },
            }, "Edit and send as new"),
            h("button", { type: "button", class: "link", on: { click: () => client.dismiss(it.cmid) } }, "Dismiss"),
          ];
      }
      rows.push(h("li", { class: "msg mine", "data-test": "msg-out", "data-cmid": it.cmid, "data-state": it.state },
        h("div", { class: "who" }, "You"),
        h("div", { class: "body", "data-test": "body" }, it.body),
        h("div", { class: "meta" }, state, actions)));
    }
    const stick = nearBottom();
    outList.replaceChildren(...rows);
    if (rows.length && status.textContent === "No messages yet.") status.textContent = "";
    if (stick) toBottom();
  }

  async function loadOlder() {
    if (loadingOlder) return;
    const tl = client.timeline(conv);
    if (tl.state !== "ready" || !tl.hasOlder) return;
    loadingOlder = true;
    try {
      await client.loadOlder(conv);
    } catch (e) {
      if (e.code === "RATE_LIMITED" || e.code === "UNAVAILABLE") {
        // Retryable: try again after the server's delay, at least a second.
        setTimeout(() => onScroll(), retryDelay(e, 1000, 1000));
      } else {
        ctx.toast("Could not load older messages (" + (e.code || e) + ")");
      }
    } finally {
      loadingOlder = false;
    }
    fillUp();
  }

  /** fillUp loads older pages while the loaded ones do not fill the pane (nothing to scroll yet). */
  function fillUp() {
    const tl = client.timeline(conv);
    if (tl.state === "ready" && tl.hasOlder && scroller.scrollHeight <= scroller.clientHeight + 40 && scroller.clientHeight > 0) {
      requestAnimationFrame(() => loadOlder());
    }
  }

  function onScroll() {
    if (scroller.scrollTop < 300) loadOlder();
  }

  function seen(entries) {
    for (const e of entries) {
      if (!e.isIntersecting) continue;
      const seq = Number(e.target.getAttribute("data-seq"));
      if (seq > readSeen) readSeen = seq;
      observer.unobserve(e.target);
    }
    scheduleRead();
  }

  function scheduleRead() {
    clearTimeout(readTimer);
    readTimer = setTimeout(() => {
      if (document.visibilityState !== "visible" || readSeen === 0) return;
      client.markRead(conv, readSeen);
    }, 250);
  }

  function onVisibility() {
    if (document.visibilityState === "visible") scheduleRead();
  }

  function drawTitle() {
    const c = client.conversation(conv);
    title.textContent = c ? c.title || c.conv : conv;
    const former = !!c && c.member === false;
    composer.classList.toggle("hidden", former);
    notMember.classList.toggle("hidden", !former);
  }

  const offs = [
    client.on("timeline", (c, change) => {
      if (c !== conv) return;
      switch (change.kind) {
        case "reset": return reset();
        case "append": return append(change.events);
        case "prepend": return prepend(change.events);
        case "update": return update(change.ev);
        case "outbox": return drawOutgoing();
      }
    }),
    client.on("convs", drawTitle),
  ];
  document.addEventListener("visibilitychange", onVisibility);
  el.dispose = () => {
    for (const off of offs) off();
    observer.disconnect();
    clearTimeout(readTimer);
    document.removeEventListener("visibilitychange", onVisibility);
  };

  drawTitle();
  queueMicrotask(() => {
    reset();
    client.openTimeline(conv);
    composer.focusBox();
  });
  return el;
}
