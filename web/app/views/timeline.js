// views/timeline.js owns one conversation's screen: the timeline and its
// composer. It promises to render incrementally: a new event appends its
// node, an older page prepends its nodes (keeping the scroll position), a
// recall replaces one node; the list is never re-rendered as a whole per
// message, so thousands of loaded messages stay responsive. Bodies are
// built as DOM nodes, never HTML (format.js: links, code, emphasis). A
// message shows its sender's avatar and name (a run of one sender's
// messages only on its first). Recall and Edit are offered only where the
// server would allow them: on the user's own messages, inside the recall
// window (and the edit window when one is configured) that GET /api/server
// tells; they disappear when the window passes. Recall asks first
// (views/confirm.js); a refusal shows as a sentence. Every string comes
// from i18n.js. Older pages load when the user scrolls near the top (or
// presses "Load older"); read marks move when messages are on screen
// (IntersectionObserver) while the page is visible. A message shows its
// edited marker, reactions (the user's own highlighted; a click toggles),
// reply count and mentions (highlighted, as text); the picker, the editor,
// the version history and the thread panel load when first used (extras.js).
// Opened at a message (/c/{id}?m=SEQ, a search hit), it shows the page
// around that message, scrolls to it and marks it; newer pages load as the
// user scrolls down (or presses "Load newer"), and "Jump to the newest"
// goes back to the live end.
//
// A message's files (only those its event carries; a recalled message has
// none) show below its text: an image as its thumbnail in a box of the
// image's proportions reserved before it loads (no jump), opening the full
// file; when there is no thumbnail (not made yet, or refused) a small image
// shows itself, a large one its link; any other file as a download link
// with its name and size. Files dropped anywhere on the screen go to the
// composer; the user's own messages waiting in the outbox show their files
// with the upload's progress.

import { retryDelay } from "../backoff.js";
import { humanSize } from "../bytes.js";
import { url } from "../urls.js";
import { renderComposer, fileChip, showProgress, dragOver, drop, why } from "./composer.js";
import { nameEl, avatarEl, onNames } from "../names.js";
import { t, when, number, errorText } from "../i18n.js";
import { formatBody } from "../format.js";

let policy = null; // GET /api/server, read once per page
const RECALL_MS = 10 * 60 * 1000; // the server's default recall window

/**
 * windows returns the recall and edit windows the server tells (ms; edit 0:
 * none); until the answer is in, the defaults (10 minutes, none).
 * @param {Function} api
 * @returns {Promise<{recall: number, edit: number}>}
 */
function windows(api) {
  if (!policy) {
    policy = api("GET", url.server()).then((s) => ({ recall: Number(s.recall_window_ms) || RECALL_MS, edit: Number(s.edit_window_ms) || 0 }), (e) => {
      policy = null;
      throw e;
    });
  }
  return policy;
}

/**
 * fill puts nodes (names) into a translated sentence at its {placeholders}.
 * @param {string} s
 * @param {Object<string, *>} parts
 * @returns {Array<*>}
 */
function fill(s, parts) {
  return s.split(/\{(\w+)\}/).map((x, i) => (i % 2 ? parts[x] : x));
}

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
  const at = Number(new URLSearchParams(location.search).get("m"));
  return new TimelineView(ctx, params.id, Number.isSafeInteger(at) && at > 0 ? at : 0).el;
}

/** recallRefusal says why a recall was refused. */
function recallRefusal(e) {
  switch (e.code) {
    case "NOT_SENDER": return t("chat.recallNotSender");
    case "RECALL_WINDOW_EXPIRED": return t("chat.recallTooLate");
    case "ALREADY_RECALLED": return t("chat.recallAlready");
  }
  return why(e);
}

function visible(ev) {
  return ev.kind === "message" || ev.kind === "member_joined" || ev.kind === "member_left";
}

/** extras loads the screens used only on demand (picker, editor, versions, thread); a failed load is tried again on the next call. */
export function extras() {
  return import("./extras.js");
}

/**
 * bodyNodes renders a message's text (format.js): DOM nodes, never HTML;
 * a mention of me (or @all) is marked.
 * @param {Function} h unused (kept for callers)
 * @param {string} text
 * @param {string} me
 * @returns {Array<string|Node>}
 */
export function bodyNodes(h, text, me) {
  return formatBody(text, me);
}

/** TimelineView is one conversation's screen while it is on the page. */
class TimelineView {
  constructor(ctx, conv, at) {
    const { h, client } = ctx;
    this.ctx = ctx;
    this.h = h;
    this.client = client;
    this.conv = conv;
    this.me = client.user;
    this.nodes = new Map(); // seq → li
    this.firstEv = null;
    this.lastEv = null;
    this.topSep = null;
    this.loadingOlder = false;
    this.loadingNewer = false;
    this.focused = null; // the li of the message opened at
    this.readSeen = 0;
    this.readTimer = 0;
    this.recallMs = RECALL_MS; // until GET /api/server answers
    this.editMs = 0;
    this.timed = new Set(); // the Recall and Edit buttons that expire

    this.title = h("h2", { id: "conv-title", "data-test": "conv-title" }, conv);
    this.status = h("p", { class: "muted", role: "status", "data-test": "timeline-status" }, t("chat.loading"));
    this.olderBtn = h("button", { type: "button", class: "link hidden", "data-test": "load-older", on: { click: () => this.loadOlder() } }, t("chat.loadOlder"));
    this.list = h("ol", { class: "events", "data-test": "events" });
    this.outList = h("ol", { class: "events outgoing", "data-test": "outgoing" });
    this.newer = h("div", { class: "older hidden" },
      h("button", { type: "button", class: "link", "data-test": "load-newer", on: { click: () => this.loadNewer() } }, t("chat.loadNewer")),
      h("button", { type: "button", class: "link", "data-test": "jump-newest", on: { click: () => ctx.navigate("/c/" + encodeURIComponent(conv), { replace: true }) } }, t("chat.jumpNewest")));
    this.scroller = h("div", {
      class: "timeline", role: "log", "aria-labelledby": "conv-title", tabindex: "0", "data-test": "timeline",
      on: { scroll: () => this.onScroll() },
    }, h("div", { class: "older" }, this.olderBtn), this.status, this.list, this.newer, this.outList);
    this.composer = renderComposer(ctx, conv, 0, (box, upd) => extras().then((m) => m.autocomplete(ctx, conv, box, upd)));
    this.notMember = h("p", { class: "composer-note muted hidden", role: "status", "data-test": "not-member" },
      t("chat.notMember"));
    this.el = h("section", {
      class: "conv-view", "aria-labelledby": "conv-title", "data-test": "conv-view", "data-conv": conv,
      on: {
        dragover: (e) => dragOver(e, this.el), dragleave: () => this.el.classList.remove("dropping"), drop: (e) => drop(e, this.el, this.composer.attachFiles),
        // Opening a message's actions checks its windows again.
        pointerover: () => this.expire(), focusin: () => this.expire(),
      },
    },
      h("div", { class: "conv-head" },
        h("a", { class: "back", href: "/", "data-nav": "", "aria-label": t("chat.back") }, "←"),
        this.title,
        h("a", { href: "/c/" + encodeURIComponent(conv) + "/members", "data-nav": "" }, t("chat.members"))),
      this.scroller, this.notMember, this.composer);
    this.observer = new IntersectionObserver((entries) => this.seen(entries), { root: this.scroller, threshold: 0.6 });
    this.listen();

    this.drawTitle();
    queueMicrotask(() => {
      this.reset();
      if (at) client.openAt(conv, at);
      else client.openTimeline(conv);
      this.composer.focusBox();
    });
    // Fetch the on-demand screens once the timeline is up, so editing and
    // reacting work offline too (an import cannot load then).
    setTimeout(() => extras().catch(() => {}), 0);
    windows(ctx.api).then((w) => {
      if (w.recall === this.recallMs && w.edit === this.editMs) return;
      this.recallMs = w.recall;
      this.editMs = w.edit;
      this.expire(true);
    }, () => {});
    this.expiry = setInterval(() => this.expire(), 1000);
  }

  /**
   * until returns when an action on the user's own message ev stops being
   * allowed (ms since the epoch; Infinity: never), for a window in ms (0: none).
   */
  until(ev, windowMs) {
    return windowMs > 0 ? Date.parse(ev.at) + windowMs : Infinity;
  }

  /**
   * expire takes Recall and Edit off the messages whose window passed;
   * redraw (the server told its windows) renders the own messages again.
   */
  expire(redraw) {
    if (redraw) {
      const tl = this.client.timeline(this.conv);
      for (const [seq] of this.nodes) {
        const ev = tl.events.get(seq);
        if (ev && ev.kind === "message" && ev.sender === this.me && !ev.recalled) this.update(ev);
      }
      return;
    }
    const now = Date.now();
    for (const b of this.timed) {
      if (!b.isConnected && b.dataset.seen) this.timed.delete(b);
      else if (b.isConnected) b.dataset.seen = "1";
      if (Number(b.dataset.until) <= now) {
        b.remove();
        this.timed.delete(b);
      }
    }
  }

  /** listen subscribes to the client and the page; el.dispose undoes it. */
  listen() {
    const offs = [
      this.client.on("timeline", (c, change) => {
        if (c !== this.conv) return;
        switch (change.kind) {
          case "reset": return this.reset();
          case "append": return this.append(change.events, change.newer);
          case "prepend": return this.prepend(change.events);
          case "update": return this.update(change.ev);
          case "outbox": return this.drawOutgoing();
          case "focus": return this.focus(change.seq);
        }
      }),
      this.client.on("convs", () => this.drawTitle()),
      this.client.on("upload", (p) => showProgress(this.outList, p)),
      onNames(() => this.drawTitle()),
      this.client.on("refused", (it, e) => {
        if (it.conv === this.conv) this.ctx.toast(it.kind === "edit" ? t("chat.editRefused", { reason: why(e) }) : t("chat.reactionRefused", { reason: why(e) }));
      }),
    ];
    const onVisibility = () => {
      if (document.visibilityState === "visible") this.scheduleRead();
    };
    document.addEventListener("visibilitychange", onVisibility);
    this.el.dispose = () => {
      for (const off of offs) off();
      if (this.thread) this.thread.close();
      this.observer.disconnect();
      clearTimeout(this.readTimer);
      clearInterval(this.expiry);
      document.removeEventListener("visibilitychange", onVisibility);
    };
  }

  /** who is how a user shows in the timeline: "You" (object: "you"), or their name (names.js). */
  who(user, object) {
    if (user !== this.me) return nameEl(this.h, user);
    return object ? t("chat.youObject") : t("chat.you");
  }

  renderEvent(ev) {
    const h = this.h;
    if (ev.kind === "recall") return null;
    if (ev.kind === "member_joined" || ev.kind === "member_left") {
      const joined = ev.kind === "member_joined";
      const text = ev.sender && ev.sender !== ev.user
        ? fill(joined ? t("chat.sysAdded") : t("chat.sysRemoved"), { actor: this.who(ev.sender), user: this.who(ev.user, true) })
        : fill(joined ? t("chat.sysJoined") : t("chat.sysLeft"), { user: this.who(ev.user) });
      return h("li", { class: "sysline", "data-test": "sys", "data-seq": ev.seq }, text);
    }
    return this.renderMsg(ev, false);
  }

  /** renderMsg renders one message, in the timeline or (inThread) in the thread panel. */
  renderMsg(ev, inThread) {
    const h = this.h;
    const mine = ev.sender === this.me;
    const pend = this.client.pending(this.conv, ev.seq);
    const act = (label, test, fn, until) => {
      const b = h("button", { type: "button", class: "link", "data-test": test, "data-until": until < Infinity ? until : false, on: { click: fn } }, label);
      if (until < Infinity) this.timed.add(b); // expire() takes it off when its window passes
      return b;
    };
    const live = !ev.recalled;
    const now = Date.now();
    const recallUntil = this.until(ev, this.recallMs);
    const editUntil = this.until(ev, this.editMs);
    const li = h("li", {
      class: ["msg", mine && "mine"], "data-test": inThread ? "thread-msg" : "msg", "data-seq": ev.seq, "data-sender": ev.sender,
      "data-state": mine ? "sent" : false,
    },
    h("div", { class: "sender" }, avatarEl(h, ev.sender), h("div", { class: "who" }, this.who(ev.sender))),
    !inThread && ev.reply_to ? act(t("chat.inThread"), "in-thread", () => this.openThread(ev.reply_to)) : null,
    ev.recalled
      ? h("div", { class: "recalled-body", "data-test": "recalled" }, t("chat.recalled"))
      : ev.body || pend.body || !(ev.attachments || []).length ? h("div", { class: "body", "data-test": "body" }, bodyNodes(h, pend.body !== null ? pend.body : ev.body, this.me)) : null,
    live ? attachments(h, ev.attachments) : null,
    live ? this.reactionBar(ev, pend.reactions) : null,
    h("div", { class: "meta" },
      h("time", { datetime: ev.at, title: when(ev.at, "datetime") }, when(ev.at, "time")),
      pend.body !== null ? h("span", { class: "state-sending", "data-test": "edit-pending" }, t("chat.editPending")) : null,
      live && ev.edit_seq ? act(t("chat.edited"), "edited", () => extras().then((m) => m.showVersions(this, ev))) : null,
      mine ? h("span", { "data-test": "state" }, t("chat.sent")) : null,
      !inThread && live && ev.replies ? act(t("chat.replies", { n: ev.replies, count: number(ev.replies) }), "replies", () => this.openThread(ev.seq)) : null,
      live ? act(t("chat.react"), "react", (e) => extras().then((m) => m.openPicker(this, ev, e.target))) : null,
      !inThread && live && !ev.reply_to ? act(t("chat.reply"), "reply", () => this.openThread(ev.seq)) : null,
      mine && live && editUntil > now ? act(t("chat.edit"), "edit", () => extras().then((m) => m.openEditor(this, ev)), editUntil) : null,
      !inThread && mine && live && recallUntil > now ? act(t("chat.recall"), "recall", () => this.recall(ev, li), recallUntil) : null,
      h("span", { class: "error", role: "alert", "data-test": "recall-error" })));
    return li;
  }

  /** reactionBar shows a message's reactions with the outbox's pending toggles applied. */
  reactionBar(ev, pending) {
    const h = this.h;
    const list = (ev.reactions || []).map((r) => ({ ...r }));
    for (const [emoji, on] of pending) {
      let r = list.find((x) => x.emoji === emoji);
      if (!r) list.push(r = { emoji, count: 0, me: false });
      if (r.me !== on) r.count += on ? 1 : -1;
      r.me = on;
    }
    const shown = list.filter((r) => r.count > 0);
    if (!shown.length) return null;
    return h("div", { class: "reactions", "data-test": "reactions" }, shown.map((r) => h("button", {
      type: "button", class: ["reaction", r.me && "me"], "data-test": "reaction", "data-emoji": r.emoji, "data-me": r.me ? "true" : "false",
      "aria-pressed": r.me ? "true" : "false",
      "aria-label": r.me ? t("chat.reactionMine", { emoji: r.emoji, n: number(r.count) }) : t("chat.reactionLabel", { emoji: r.emoji, n: number(r.count) }),
      on: { click: () => this.toggle(ev, r.emoji, !r.me) },
    }, r.emoji + " " + number(r.count))));
  }

  /** toggle writes a reaction change to the outbox. */
  toggle(ev, emoji, on) {
    this.client.react(this.conv, ev.seq, emoji, on).catch((e) => this.ctx.toast(t("chat.reactionNotKept", { reason: why(e) })));
  }

  openThread(root) {
    extras().then((m) => m.openThread(this, root));
  }

  /** recall asks first, then recalls ev; a refusal shows its sentence under the message. */
  async recall(ev, li) {
    const err = li.querySelector("[data-test=recall-error]");
    err.textContent = "";
    let confirmDialog;
    try {
      ({ confirmDialog } = await import("./confirm.js"));
    } catch {
      err.textContent = errorText("UNAVAILABLE"); // offline before the dialog was ever loaded
      return;
    }
    const yes = await confirmDialog(this.h, { title: t("chat.recallTitle"), body: t("chat.recallBody"), ok: t("chat.recall"), cancel: t("chat.cancel") });
    if (!yes) return;
    try {
      await this.client.recall(this.conv, ev.seq);
    } catch (e) {
      const cur = this.nodes.get(ev.seq) || li;
      const errEl = cur.querySelector("[data-test=recall-error]");
      if (errEl) errEl.textContent = recallRefusal(e);
    }
  }

  /** build renders events in order, with a day separator where the day changes (and first). */
  build(events, prev) {
    const frag = document.createDocumentFragment();
    let first = null;
    let p = prev;
    for (const ev of events) {
      const li = this.renderEvent(ev);
      if (!li) continue;
      if (!p || dayKey(p) !== dayKey(ev)) {
        const sep = this.h("li", { class: "day", "aria-hidden": "false" }, when(ev.at, "day"));
        if (!first) first = sep;
        frag.appendChild(sep);
      }
      // A run of one sender's messages (same day, minutes apart) shows the sender once.
      if (p && ev.kind === "message" && p.kind === "message" && p.sender === ev.sender && dayKey(p) === dayKey(ev) && Date.parse(ev.at) - Date.parse(p.at) < 5 * 60 * 1000) li.classList.add("cont");
      frag.appendChild(li);
      this.nodes.set(ev.seq, li);
      if (li.classList.contains("msg") && ev.sender !== this.me) this.observer.observe(li);
      p = ev;
    }
    return { frag, first, last: p };
  }

  nearBottom() {
    const s = this.scroller;
    return s.scrollHeight - s.scrollTop - s.clientHeight < 120;
  }

  toBottom() {
    this.scroller.scrollTop = this.scroller.scrollHeight;
  }

  reset() {
    const tl = this.client.timeline(this.conv);
    this.nodes.clear();
    this.observer.disconnect();
    this.list.replaceChildren();
    this.firstEv = this.lastEv = this.topSep = null;
    if (tl.state === "ready") {
      const evs = [...tl.events.values()].filter(visible).sort((a, b) => a.seq - b.seq);
      const b = this.build(evs, null);
      this.list.appendChild(b.frag);
      this.topSep = b.first;
      this.firstEv = evs[0] || null;
      this.lastEv = evs[evs.length - 1] || null;
      this.status.textContent = evs.length ? "" : t("chat.empty");
    } else if (tl.error) {
      this.status.textContent = tl.error.code === "NOT_MEMBER" ? t("chat.cannotSee") : t("chat.cannotLoad", { reason: why(tl.error) });
    } else {
      this.status.textContent = t("chat.loading");
    }
    this.olderBtn.classList.toggle("hidden", !(tl.state === "ready" && tl.hasOlder));
    this.newer.classList.toggle("hidden", !(tl.state === "ready" && tl.hasNewer));
    this.focused = null;
    this.drawOutgoing();
    if (tl.state === "ready" && tl.focus && this.nodes.has(tl.focus)) this.focus(tl.focus);
    else this.toBottom();
    this.fillUp();
  }

  /** focus scrolls to a loaded message and marks it (the one a search hit opened). */
  focus(seq) {
    const li = this.nodes.get(seq);
    if (!li) return;
    if (this.focused) {
      this.focused.classList.remove("focused");
      this.focused.removeAttribute("data-focus");
    }
    li.classList.add("focused");
    li.setAttribute("data-focus", "true");
    this.focused = li;
    li.scrollIntoView({ block: "center" });
  }

  /** append adds events at the end; a newer page (of a timeline opened at a message) keeps the scroll position. */
  append(events, newer) {
    const tl = this.client.timeline(this.conv);
    this.newer.classList.toggle("hidden", !tl.hasNewer);
    const evs = events.filter(visible);
    if (!evs.length) return;
    const stick = !newer && this.nearBottom();
    const b = this.build(evs, this.lastEv);
    this.list.appendChild(b.frag);
    if (!this.firstEv) {
      this.firstEv = evs[0];
      this.topSep = b.first;
    }
    this.lastEv = b.last;
    this.status.textContent = "";
    this.drawOutgoing();
    if (stick) this.toBottom();
  }

  prepend(events) {
    const tl = this.client.timeline(this.conv);
    this.olderBtn.classList.toggle("hidden", !tl.hasOlder);
    const evs = events.filter(visible);
    if (!evs.length) return;
    const before = this.scroller.scrollHeight;
    const b = this.build(evs, null);
    if (this.topSep && this.firstEv && dayKey(b.last) === dayKey(this.firstEv)) this.topSep.remove();
    this.list.insertBefore(b.frag, this.list.firstChild);
    this.topSep = b.first;
    this.firstEv = evs[0];
    if (!this.lastEv) this.lastEv = b.last;
    this.status.textContent = "";
    this.scroller.scrollTop += this.scroller.scrollHeight - before;
  }

  update(ev) {
    const old = this.nodes.get(ev.seq);
    if (!old) return;
    const li = this.renderEvent(ev);
    if (this.editing === ev.seq) return; // the open editor keeps its node; it redraws on close
    if (old.classList.contains("cont")) li.classList.add("cont");
    old.replaceWith(li);
    this.observer.unobserve(old);
    this.nodes.set(ev.seq, li);
    if (this.focused === old) {
      this.focused = null;
      this.focus(ev.seq);
    }
  }

  drawOutgoing() {
    const rows = this.client.outgoing(this.conv).map((it) => this.outgoingRow(it));
    const stick = this.nearBottom();
    this.outList.replaceChildren(...rows);
    if (rows.length && this.status.textContent === t("chat.empty")) this.status.textContent = "";
    if (stick) this.toBottom();
  }

  /** outgoingRow shows one of the user's messages not (yet) on the timeline, with what can be done about it. */
  outgoingRow(it) {
    const { h, client } = this;
    let state;
    let actions = [];
    switch (it.state) {
      case "pending":
        state = h("span", { class: "state-sending", "data-test": "state" }, (it.files || []).every((f) => f.file) ? t("chat.sending") : t("chat.uploading"));
        break;
      case "sent":
        state = h("span", { "data-test": "state" }, t("chat.sent"));
        break;
      case "expired":
        state = h("span", { "data-test": "state" }, t("chat.sentExpired"));
        actions = [h("button", { type: "button", class: "link", on: { click: () => client.dismiss(it.cmid) } }, t("chat.dismiss"))];
        break;
      default:
        state = h("span", { class: "state-failed", "data-test": "state", "data-code": it.code || false },
          t("chat.failed", { reason: it.code ? errorText(it.code) : it.reason || errorText("") }));
        actions = [
          h("button", {
            type: "button", class: "link", "data-test": "edit-resend",
            on: { click: () => { this.composer.setText(it.body); if ((it.files || []).length) client.redraft(it.cmid); else client.dismiss(it.cmid); } },
          }, t("chat.editResend")),
          h("button", { type: "button", class: "link", on: { click: () => client.dismiss(it.cmid) } }, t("chat.dismiss")),
        ];
    }
    return h("li", { class: "msg mine", "data-test": "msg-out", "data-cmid": it.cmid, "data-state": it.state },
      h("div", { class: "sender" }, avatarEl(h, this.me), h("div", { class: "who" }, t("chat.you"))),
      it.body || !(it.files || []).length ? h("div", { class: "body", "data-test": "body" }, it.body) : null,
      (it.files || []).length ? h("ul", { class: "chips" }, it.files.map((f) => fileChip(h, client, f))) : null,
      h("div", { class: "meta" }, state, actions));
  }

  async loadOlder() {
    if (this.loadingOlder) return;
    const tl = this.client.timeline(this.conv);
    if (tl.state !== "ready" || !tl.hasOlder) return;
    this.loadingOlder = true;
    try {
      await this.client.loadOlder(this.conv);
    } catch (e) {
      if (e.code === "RATE_LIMITED" || e.code === "UNAVAILABLE") {
        // Retryable: try again after the server's delay, at least a second.
        setTimeout(() => this.onScroll(), retryDelay(e, 1000, 1000));
      } else {
        this.ctx.toast(t("chat.olderFailed", { reason: why(e) }));
      }
    } finally {
      this.loadingOlder = false;
    }
    this.fillUp();
  }

  async loadNewer() {
    if (this.loadingNewer) return;
    this.loadingNewer = true;
    try {
      await this.client.loadNewer(this.conv);
    } catch (e) {
      if (e.code === "RATE_LIMITED" || e.code === "UNAVAILABLE") {
        setTimeout(() => this.onScroll(), retryDelay(e, 1000, 1000));
      } else {
        this.ctx.toast(t("chat.newerFailed", { reason: why(e) }));
      }
    } finally {
      this.loadingNewer = false;
    }
  }

  /** fillUp loads older pages while the loaded ones do not fill the pane (nothing to scroll yet). */
  fillUp() {
    const tl = this.client.timeline(this.conv);
    const s = this.scroller;
    if (tl.state === "ready" && tl.hasOlder && s.scrollHeight <= s.clientHeight + 40 && s.clientHeight > 0) {
      requestAnimationFrame(() => this.loadOlder());
    }
  }

  onScroll() {
    const s = this.scroller;
    if (s.scrollTop < 300) this.loadOlder();
    if (this.client.timeline(this.conv).hasNewer && s.scrollHeight - s.scrollTop - s.clientHeight < 300) this.loadNewer();
  }

  seen(entries) {
    for (const e of entries) {
      if (!e.isIntersecting) continue;
      const seq = Number(e.target.getAttribute("data-seq"));
      if (seq > this.readSeen) this.readSeen = seq;
      this.observer.unobserve(e.target);
    }
    this.scheduleRead();
  }

  scheduleRead() {
    clearTimeout(this.readTimer);
    this.readTimer = setTimeout(() => {
      if (document.visibilityState !== "visible" || this.readSeen === 0) return;
      this.client.markRead(this.conv, this.readSeen);
    }, 250);
  }

  drawTitle() {
    const c = this.client.conversation(this.conv);
    this.title.textContent = c ? this.client.title(c) : this.conv;
    const former = !!c && c.member === false;
    this.composer.classList.toggle("hidden", former);
    this.notMember.classList.toggle("hidden", !former);
  }
}

/** The box a thumbnail fits in (the server's thumbnails fit 320 × 320). */
const THUMB_W = 320;
const THUMB_H = 240;
/** Below this size an image without a thumbnail is shown itself. */
const SMALL_IMAGE = 1 << 20;
const RASTER = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);

/**
 * attachments renders a message's files: images as thumbnails, other files
 * as download links.
 * @param {Function} h
 * @param {Array<{id: string, name: string, size: number, mime: string, width?: number, height?: number}>} [list]
 * @returns {HTMLElement|null}
 */
export function attachments(h, list) {
  if (!list || !list.length) return null;
  return h("div", { class: "files", "data-test": "attachments" }, list.map((a) => (RASTER.has(a.mime) && a.width > 0 && a.height > 0 ? imageLink(h, a) : fileLink(h, a))));
}

function fileLink(h, a) {
  return h("a", { href: url.file(a.id), download: a.name, class: "file", "data-test": "file-link", "data-file": a.id },
    h("span", { class: "file-icon", "aria-hidden": "true" }, "📄"),
    h("span", { class: "file-name" }, a.name), " ", h("span", { class: "muted" }, humanSize(a.size)));
}

/**
 * imageLink shows an image's thumbnail in a box of the image's proportions
 * (set before it loads) and opens the full file. Without a thumbnail it
 * asks once more a little later (it may be in the making), then shows the
 * image itself when it is small, else its file link.
 */
function imageLink(h, a) {
  const scale = Math.min(1, THUMB_W / a.width, THUMB_H / a.height);
  const w = Math.max(1, Math.round(a.width * scale));
  const ht = Math.max(1, Math.round(a.height * scale));
  let tries = 0;
  const img = h("img", {
    src: url.thumb(a.id), width: w, height: ht, alt: a.name, decoding: "async", "data-test": "thumb", "data-file": a.id,
    on: {
      error: () => {
        tries++;
        if (tries === 1 && a.size <= SMALL_IMAGE) {
          img.dataset.fallback = "full";
          img.src = url.file(a.id);
        } else if (tries === 1) {
          setTimeout(() => (img.src = url.thumb(a.id, 1)), 3000);
        } else {
          link.replaceWith(fileLink(h, a));
        }
      },
    },
  });
  const link = h("a", { href: url.file(a.id), target: "_blank", rel: "noopener", class: "file-image", "data-test": "file-image", "data-file": a.id, title: t("chat.fileTitle", { name: a.name, size: humanSize(a.size) }) }, img);
  return link;
}
