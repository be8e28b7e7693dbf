// store.js is the core of the page: the Client owns the signed-in user's
// conversations, the timelines the user opened, the outbox and the one
// connection. It holds state, exposes methods and announces changes; it
// never changes the page: no navigation, no notifications, no document
// title, no elements. Views and the app shell (app.js) read its state (its
// methods and what they return), change it only by calling its methods and
// listen to its events; they never talk to the socket. It keeps the client
// obligations of the protocol (docs/web-client.md#promises):
//   - a message is written to the outbox (IndexedDB) before it is first
//     sent, resent with the same cmid after every reconnect and reload until
//     the server answers, dropped on success, kept with its reason on a
//     terminal code (ORIGINAL_EXPIRED: "sent, expired"), kept on
//     UNAVAILABLE / RATE_LIMITED (retried after retry_after_ms) / no reply;
//   - only one tab of the browser sends at a time (the outbox lock), and a
//     timeline shows each event once: events are keyed by seq, outbox items
//     by cmid, and an item is hidden once its seq is on the timeline;
//   - a timeline opens at the newest page and reads older pages only when
//     asked (loadOlder): history the user does not scroll to is never read;
//     opened at one message (openAt, a search hit) it reads the page around
//     that message instead, and newer pages only when asked (loadNewer):
//     until it reaches the head it is "detached" (hasNewer), pushes and
//     forward syncs leave it alone, and sending from it goes back to the
//     newest page;
//   - a timeline's cursor (hi) moves only after a whole page is applied; a
//     push is applied only when it is the next seq, anything else (a gap, a
//     hint ahead, resync, reconnect) syncs from the cursor; EPOCH_CHANGED or
//     CURSOR_AHEAD rebuild the timeline;
//   - read state from the user's other devices (read hints) clears unread;
//   - edits and reactions are outbox items like sends (same cmid on every
//     resend, dropped on success or a terminal code: "refused"); derived
//     state (edits, reactions, replies) follows the fold rule of fold.js;
//   - files attached in the composer go into the conversation's draft item
//     (with their Blobs) and upload at once (upload.js, loaded then); a
//     message with files is sent, with their ids as attachments, once
//     every one of them is uploaded: until then it waits in the outbox
//     while the messages after it go.
//
// Events (on(name, fn)): "conn" (state), "auth" (code, detail), "convs" (),
// "arrived" (convs entry, ev): a pushed event moved a known conversation's
// head (after "convs"), "timeline" (conv, change) with change.kind "reset" |
// "append" (events; newer: a page loadNewer read) | "prepend" (events) |
// "update" (ev) | "outbox" | "focus" (seq: show that loaded message),
// "thread" (thread): an open thread changed, "refused" (item, error): an
// edit or reaction was refused with a terminal code and dropped, "upload"
// ({cmid, key, sent, size}): an attached file's upload moved, "draft"
// (conv): a draft's files changed, "signal" (frame): any other push
// (typing, presence).

import { api, ApiError, RETRYABLE } from "./api.js";
import { Backoff, retryDelay } from "./backoff.js";
import { Conn } from "./conn.js";
import { fold, mentionsOf } from "./fold.js";
import { newID } from "./id.js";
import { Outbox } from "./outbox.js";
import { url } from "./urls.js";
import { nameOf, setName } from "./names.js";
import { t } from "./i18n.js";

/** Events per page when opening a timeline or reading older history. */
export const PAGE = 50;
const FORWARD_LIMIT = 200;

/** Client is the page's core; app.js makes one per signed-in session. */
export class Client {
  /** @param {{user: {id: string, name?: string, role: string}, device: string}} me from GET /api/me */
  constructor(me) {
    this.me = me;
    this.user = me.user.id;
    this.device = me.device;
    /** @type {Map<string, object>} conv id → convs entry */
    this.convMap = new Map();
    /** @type {Map<string, object>} conv id → timeline */
    this.tls = new Map();
    this.listeners = new Map();
    /** @type {Map<string, object>} cmid → outbox item not yet confirmed */
    this.items = new Map();
    /** @type {Map<string, {item: object, seq: number}>} cmid → item the server confirmed, kept 10 minutes so it shows until its event does */
    this.sent = new Map();
    /** @type {Map<string, number>} cmid → seq of an own event matched to a pending item before its reply */
    this.claims = new Map();
    this.outbox = null;
    this.pumping = false;
    this.pumpAgain = false;
    this.retryTimer = 0;
    this.retry = new Backoff(); // the outbox's resends while the socket is up
    this.refreshTimer = 0;
    this.stopped = false;
    this.convsLoaded = false;
    this.readWanted = new Map(); // conv → seq to mark read once possible
    /** @type {Map<string, {sent: number, size: number}>} file key → how far its upload is */
    this.progress = new Map();
    this.uploader = null; // upload.js's Uploader, once a file is seen
    this.draftChain = Promise.resolve();
    this.conn = new Conn({
      onPush: (f) => this.push(f),
      onOpen: () => this.opened(),
      onState: (s) => this.emit("conn", s),
      onAuth: (code, detail) => this.emit("auth", code, detail),
    });
  }

  /**
   * on registers a listener; it returns the function that removes it.
   * @param {string} name
   * @param {Function} fn
   * @returns {function(): void}
   */
  on(name, fn) {
    if (!this.listeners.has(name)) this.listeners.set(name, new Set());
    this.listeners.get(name).add(fn);
    return () => this.listeners.get(name).delete(fn);
  }

  emit(name, ...args) {
    const set = this.listeners.get(name);
    if (!set) return;
    for (const fn of [...set]) {
      try {
        fn(...args);
      } catch (e) {
        console.error(e);
      }
    }
  }

  /** start opens the outbox and the connection. */
  async start() {
    try {
      this.outbox = await Outbox.open(this.user);
      this.outbox.onChange((c) => this.outboxChanged(c));
      for (const it of await this.outbox.list()) this.items.set(it.cmid, { kind: "send", ...it });
      for (const it of this.items.values()) this.emit("timeline", it.conv, { kind: "outbox" });
      for (const it of this.items.values()) this.filesChanged(it);
    } catch (e) {
      console.error("outbox unavailable", e);
    }
    if (this.stopped) return;
    this.conn.start();
    // Show the list at once, over HTTP, while the socket connects.
    this.refreshConversations().catch(() => {});
  }

  /** stop closes the connection and the outbox (sign-out). */
  stop() {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    clearTimeout(this.refreshTimer);
    if (this.uploader) this.uploader.stop();
    this.conn.stop();
    if (this.outbox) this.outbox.close();
  }

  /** @returns {string} "connecting" | "online" | "offline" */
  connState() {
    return this.conn.state;
  }

  // --- requests: over the socket when it is up, else over HTTP ---

  sync(conv, after, limit, epoch, thread) {
    if (this.conn.online()) {
      const f = { t: "sync", conv, after, limit };
      if (epoch) f.epoch = epoch;
      if (thread) f.thread = thread;
      return this.conn.request(f);
    }
    return api("GET", url.events(conv, after, limit, epoch, thread));
  }

  // --- conversations ---

  /**
   * conversations returns the conversations, latest activity first.
   * @returns {object[]} convs entries (docs/protocol.md "convs")
   */
  conversations() {
    return [...this.convMap.values()].sort((a, b) => {
      const ta = a.last ? a.last.at : "";
      const tb = b.last ? b.last.at : "";
      if (ta !== tb) return ta < tb ? 1 : -1;
      return a.conv < b.conv ? -1 : a.conv > b.conv ? 1 : 0;
    });
  }

  /**
   * conversation returns one entry, or undefined.
   * @param {string} id
   */
  conversation(id) {
    return this.convMap.get(id);
  }

  /** @returns {boolean} whether the list has been read once */
  conversationsLoaded() {
    return this.convsLoaded;
  }

  /**
   * title names a conversation: its title, else for a direct conversation
   * the other user, else its id.
   * @param {object} c convs entry
   * @returns {string}
   */
  title(c) {
    if (c.title) return c.title;
    const m = /^dm:([^:]+):([^:]+)$/.exec(c.conv);
    if (m) return nameOf(m[1] === this.user ? m[2] : m[1]);
    return c.kind === "direct" ? t("chat.directMessage") : c.conv;
  }

  /** @returns {number} unread messages over every conversation */
  totalUnread() {
    let n = 0;
    for (const c of this.convMap.values()) n += c.unread || 0;
    return n;
  }

  /**
   * refreshConversations reads every page of the list again and announces "convs".
   * @returns {Promise<void>}
   */
  async refreshConversations() {
    const next = new Map();
    let before = "";
    for (let i = 0; i < 100; i++) {
      let page;
      if (this.conn.online()) {
        const f = { t: "convs", limit: 200 };
        if (before) f.before = before;
        page = await this.conn.request(f);
      } else {
        page = await api("GET", url.convs(200, before));
      }
      for (const c of page.convs || []) {
        // A push applied while this page was on its way is newer than it.
        const old = this.convMap.get(c.conv);
        if (old && old.head > c.head) {
          c.head = old.head;
          c.last = old.last;
          c.unread = Math.max(old.unread || 0, c.unread || 0);
          c.mentions_unread = Math.max(old.mentions_unread || 0, c.mentions_unread || 0);
        }
        if (old && old.read > c.read) c.read = old.read;
        next.set(c.conv, c);
      }
      if (!page.has_more || !page.next) break;
      before = page.next;
    }
    this.convMap = next;
    this.convsLoaded = true;
    this.emit("convs");
  }

  /** seed shows a kept list (an offline start) until the server's is read; announces "convs". */
  seed(list) {
    if (this.convsLoaded) return;
    for (const c of list) if (!this.convMap.has(c.conv)) this.convMap.set(c.conv, c);
    this.emit("convs");
  }

  /** scheduleRefresh refreshes the list soon, once for a burst of causes. */
  scheduleRefresh() {
    if (this.refreshTimer) return;
    this.refreshTimer = setTimeout(() => {
      this.refreshTimer = 0;
      this.refreshConversations().catch(() => {});
    }, 300);
  }

  // --- connection events ---

  opened() {
    this.retry.reset();
    this.refreshConversations()
      .catch(() => {})
      .then(() => {
        for (const tl of this.tls.values()) {
          if (tl.state === "ready") this.syncForward(tl);
          else if (tl.wanted && tl.state === "empty") this.open(tl.conv, tl.focus);
        }
        if (this.th) this.loadThread(this.th);
      });
    for (const [conv, seq] of this.readWanted) this.markRead(conv, seq);
    this.pump();
  }

  push(f) {
    if (f.t === "event" && f.ev) this.pushedEvent(f.ev);
    else if (f.t === "hint") this.hint(f);
    else if (f.t === "resync") {
      this.scheduleRefresh();
      for (const tl of this.tls.values()) if (tl.state === "ready") this.syncForward(tl);
      if (this.th) this.loadThread(this.th);
    } else this.emit("signal", f);
  }

  /** signal sends a frame that has no reply (typing, presence) if the socket is up. */
  signal(f) {
    this.conn.send(f);
  }

  pushedEvent(ev) {
    const c = this.convMap.get(ev.conv);
    if (!c) {
      this.scheduleRefresh(); // a conversation we did not know: we were added
    } else if (ev.seq > c.head) {
      c.head = ev.seq;
      c.last = ev;
      if (ev.kind === "message" && ev.sender !== this.user && ev.seq > c.read) c.unread = (c.unread || 0) + 1;
      if (this.mentionsMe(ev) && ev.seq > c.read) c.mentions_unread = (c.mentions_unread || 0) + 1;
      // Unread after a recall, and "member" after a join or leave, come from the server.
      if (ev.kind === "recall" || ev.kind === "member_left" || ev.kind === "member_joined") this.scheduleRefresh();
      this.emit("convs");
      this.emit("arrived", c, ev);
    }
    this.threadPush(ev);
    const tl = this.tls.get(ev.conv);
    if (!tl) return;
    if (tl.state === "loading") {
      // The newest page is on its way and may predate this event: sync after it.
      tl.seenHead = Math.max(tl.seenHead || 0, ev.seq);
      return;
    }
    if (tl.state !== "ready") return;
    if (tl.hasNewer) {
      // Detached: the newer pages are read when asked; remember the head.
      tl.seenHead = Math.max(tl.seenHead || 0, ev.seq);
      return;
    }
    if (ev.seq === tl.hi + 1) {
      this.applyForward(tl, [ev], ev.seq);
    } else if (ev.seq > tl.hi + 1) {
      this.syncForward(tl);
    }
  }

  hint(f) {
    const c = this.convMap.get(f.conv);
    if (f.read !== undefined) {
      // The user read on another device.
      if (c && f.read > c.read) {
        c.read = f.read;
        this.recountUnread(c);
        this.emit("convs");
      }
      return;
    }
    if (!c || f.head > c.head) this.scheduleRefresh();
    const tl = this.tls.get(f.conv);
    if (tl && (tl.state === "loading" || tl.hasNewer)) tl.seenHead = Math.max(tl.seenHead || 0, f.head);
    if (tl && tl.state === "ready" && f.head > tl.hi) this.syncForward(tl);
  }

  /**
   * mentionsMe reports whether a message or edit of someone else mentions the user.
   * @param {object} ev
   */
  mentionsMe(ev) {
    return (ev.kind === "message" || ev.kind === "edit") && ev.sender !== this.user && !ev.recalled && mentionsOf(ev).includes(this.user);
  }

  recountUnread(c) {
    if (c.read >= c.head) {
      c.unread = 0;
      c.mentions_unread = 0;
      return;
    }
    const tl = this.tls.get(c.conv);
    if (tl && tl.state === "ready" && !tl.hasNewer && tl.lo <= c.read + 1) {
      let n = 0;
      let m = 0;
      for (const ev of tl.events.values()) {
        if (ev.seq > c.read && ev.kind === "message" && ev.sender !== this.user && !ev.recalled) n++;
        if (ev.seq > c.read && this.mentionsMe(ev)) m++;
      }
      c.unread = n;
      c.mentions_unread = m;
    } else {
      this.scheduleRefresh();
    }
  }

  // --- timelines ---

  /**
   * timeline returns the state of a conversation's timeline:
   * {conv, events: Map<seq, ev>, lo, hi, hasOlder, hasNewer, focus, state: "empty"|"loading"|"ready", error?}.
   * hasNewer: events after hi are not read yet (opened at a message);
   * focus: the message it was opened at (0: the newest page).
   * @param {string} conv
   */
  timeline(conv) {
    let tl = this.tls.get(conv);
    if (!tl) {
      tl = { conv, events: new Map(), lo: 1, hi: 0, epoch: 0, minSeq: 1, hasOlder: false, hasNewer: false, focus: 0, state: "empty", chain: Promise.resolve(), wanted: false, error: null };
      this.tls.set(conv, tl);
    }
    return tl;
  }

  serial(tl, fn) {
    const p = tl.chain.then(fn, fn);
    tl.chain = p.catch(() => {});
    return p;
  }

  /**
   * openTimeline loads the newest page of a conversation (once; again when
   * it was opened at a message and is detached); "timeline" reset is
   * announced when it is there.
   * @param {string} conv
   * @returns {Promise<void>}
   */
  openTimeline(conv) {
    return this.open(conv, 0);
  }

  /**
   * openAt opens a conversation at message seq (a search hit): when that
   * message is loaded already, "timeline" focus is announced at once; else
   * the page around it is read (a sync from half a page before it, not
   * the whole history) and "timeline" reset is announced with focus set.
   * @param {string} conv
   * @param {number} seq
   * @returns {Promise<void>}
   */
  openAt(conv, seq) {
    return this.open(conv, seq);
  }

  open(conv, seq) {
    const tl = this.timeline(conv);
    tl.wanted = true;
    if (seq && tl.state === "ready" && tl.events.has(seq)) {
      tl.focus = seq;
      this.emit("timeline", conv, { kind: "focus", seq });
      return tl.chain;
    }
    const live = tl.state === "ready" && !tl.hasNewer;
    if (!seq && (live || (tl.state === "loading" && !tl.focus))) return tl.chain;
    tl.focus = seq || 0;
    tl.state = "loading";
    return this.serial(tl, async () => {
      try {
        await this.load(tl, seq);
      } catch (e) {
        tl.state = "empty";
        tl.error = e;
        this.emit("timeline", conv, { kind: "reset" });
      }
    });
  }

  /**
   * load reads a timeline's first page: the newest (at 0), else the page
   * around message at. A newest page that is not the head (events arrived
   * since the list was read) is followed forward; a page around a message
   * that is not the head leaves the timeline detached (hasNewer).
   */
  async load(tl, at) {
    let c = this.convMap.get(tl.conv);
    if (!c) {
      await this.refreshConversations();
      c = this.convMap.get(tl.conv);
    }
    if (!c) throw new ApiError("NOT_MEMBER", 404, "conversation not found or not visible", 0);
    const floor = Math.max(0, c.min_seq - 1);
    const head = Math.max(c.head, at || 0); // the list may predate the message
    let after = Math.max(floor, head - PAGE);
    if (at) after = Math.max(floor, Math.min(after, at - 1 - PAGE / 2));
    const page = await this.sync(tl.conv, after, PAGE, 0);
    tl.events = new Map();
    tl.epoch = page.epoch;
    tl.minSeq = page.min_seq;
    tl.lo = after + 1;
    tl.hasOlder = after > Math.max(0, page.min_seq - 1);
    this.applyPage(tl, page.events);
    tl.hi = page.next_after; // only after the whole page is applied
    tl.hasNewer = !!(at && page.has_more);
    tl.state = "ready";
    tl.error = null;
    this.emit("timeline", tl.conv, { kind: "reset" });
    if (!tl.hasNewer) await this.goneLive(tl, page.has_more);
    this.ack(tl);
  }

  /** goneLive follows a timeline that reached the head forward to what arrived meanwhile. */
  async goneLive(tl, more) {
    if (more || (tl.seenHead || 0) > tl.hi) await this.forward(tl);
    tl.seenHead = 0;
  }

  /**
   * loadNewer reads the page after the newest loaded event of a detached
   * timeline; "append" (newer) is announced, and once the page reaches the
   * head the timeline is live again.
   * @param {string} conv
   * @returns {Promise<number>} how many events were added
   */
  loadNewer(conv) {
    const tl = this.timeline(conv);
    return this.serial(tl, async () => {
      if (tl.state !== "ready" || !tl.hasNewer) return 0;
      let page;
      try {
        page = await this.sync(conv, tl.hi, PAGE, tl.epoch);
      } catch (e) {
        if (e.code === "EPOCH_CHANGED" || e.code === "CURSOR_AHEAD") {
          this.rebuild(tl);
          return 0;
        }
        throw e;
      }
      const { added, updated } = this.applyPage(tl, page.events, true);
      if (page.next_after > tl.hi) tl.hi = page.next_after;
      tl.hasNewer = !!page.has_more;
      this.emit("timeline", conv, { kind: "append", events: added, newer: true });
      for (const ev of updated) this.emit("timeline", conv, { kind: "update", ev });
      if (!tl.hasNewer) await this.goneLive(tl, false);
      this.ack(tl);
      return added.length;
    });
  }

  /** forward pages from the cursor until the head (not for a detached timeline); serialised by the caller. */
  async forward(tl) {
    if (tl.hasNewer) return;
    for (;;) {
      const page = await this.sync(tl.conv, tl.hi, FORWARD_LIMIT, tl.epoch);
      this.applyForward(tl, page.events, page.next_after);
      if (!page.has_more) return;
    }
  }

  /**
   * syncForward brings a ready timeline up to the head (after a gap, a hint,
   * a resync, a reconnect).
   * @param {object} tl
   */
  syncForward(tl) {
    if (tl.syncQueued) return tl.chain;
    tl.syncQueued = true;
    return this.serial(tl, async () => {
      tl.syncQueued = false;
      if (tl.state !== "ready") return;
      try {
        await this.forward(tl);
        this.ack(tl);
      } catch (e) {
        if (e.code === "EPOCH_CHANGED" || e.code === "CURSOR_AHEAD") this.rebuild(tl);
        else if (e.code === "NOT_MEMBER") {
          tl.error = e;
          this.emit("timeline", tl.conv, { kind: "reset" });
        }
        // UNAVAILABLE and the like: the next push, hint or reconnect syncs again.
      }
    });
  }

  rebuild(tl) {
    tl.state = "empty";
    tl.events = new Map();
    tl.hi = 0;
    tl.hasNewer = false;
    tl.focus = 0;
    this.emit("timeline", tl.conv, { kind: "reset" });
    this.scheduleRefresh();
    setTimeout(() => this.openTimeline(tl.conv), 0);
  }

  ack(tl) {
    if (!this.conn.online() || tl.hi <= 0 || tl.hi <= (tl.acked || 0)) return;
    const seq = tl.hi;
    this.conn.request({ t: "ack", conv: tl.conv, seq }).then(() => {
      tl.acked = Math.max(tl.acked || 0, seq);
    }, () => {});
  }

  /** applyForward applies a page (or one push) at the cursor, then moves the cursor. */
  applyForward(tl, events, nextAfter) {
    const { added, updated } = this.applyPage(tl, events, true);
    if (nextAfter > tl.hi) tl.hi = nextAfter;
    if (added.length) this.emit("timeline", tl.conv, { kind: "append", events: added });
    for (const ev of updated) this.emit("timeline", tl.conv, { kind: "update", ev });
  }

  /**
   * applyPage adds events not yet known (by seq) and applies recalls. An own
   * event of this device is matched to a pending outbox item with its body
   * (claim): any new event (forward, after the cursor), but an event of
   * history only when it is at most 5 minutes older than the item (by the
   * two clocks), so an old message cannot hide a new pending one.
   */
  applyPage(tl, events, forward) {
    const added = [];
    const updated = new Set();
    for (const ev of events || []) {
      if (tl.events.has(ev.seq)) continue;
      tl.events.set(ev.seq, ev);
      added.push(ev);
      for (const m of fold(tl.events, ev, this.user)) updated.add(m);
      if (ev.kind === "message" && ev.sender === this.user && ev.device === this.device) this.claim(ev, forward);
    }
    added.sort((a, b) => a.seq - b.seq);
    return { added, updated: [...updated].filter((m) => !added.includes(m)) };
  }

  /** claim matches an own event that came before its send's reply to its outbox item, so it shows once. */
  claim(ev, forward) {
    for (const [, s] of this.sent) if (s.seq === ev.seq) return;
    const taken = new Set(this.claims.values());
    if (taken.has(ev.seq)) return;
    const at = Date.parse(ev.at) || 0;
    for (const it of this.items.values()) {
      if (!forward && at < it.created - 5 * 60 * 1000) continue;
      if (it.conv === ev.conv && it.kind === "send" && it.state === "pending" && it.body === ev.body && sameFiles(it, ev) && !this.claims.has(it.cmid)) {
        this.claims.set(it.cmid, ev.seq);
        return;
      }
    }
  }

  /**
   * loadOlder reads the page before the oldest loaded event; "prepend" is announced.
   * @param {string} conv
   * @returns {Promise<number>} how many events were added
   */
  loadOlder(conv) {
    const tl = this.timeline(conv);
    return this.serial(tl, async () => {
      if (tl.state !== "ready" || !tl.hasOlder) return 0;
      const floor = Math.max(0, tl.minSeq - 1);
      const after = Math.max(floor, tl.lo - 1 - PAGE);
      const limit = tl.lo - 1 - after;
      if (limit < 1) {
        tl.hasOlder = false;
        return 0;
      }
      const page = await this.sync(conv, after, limit, tl.epoch);
      const lo = tl.lo;
      const older = (page.events || []).filter((ev) => ev.seq < lo);
      const { added, updated } = this.applyPage(tl, older);
      tl.lo = after + 1;
      tl.minSeq = page.min_seq;
      tl.hasOlder = after > Math.max(0, page.min_seq - 1);
      this.emit("timeline", conv, { kind: "prepend", events: added });
      for (const ev of updated) this.emit("timeline", conv, { kind: "update", ev });
      return added.length;
    });
  }

  // --- outbox ---

  /**
   * outgoing lists the conversation's own messages not (yet) shown as
   * events: pending, failed, expired, or confirmed but not yet on the timeline.
   * @param {string} conv
   * @returns {Array<{cmid: string, body: string, state: string, reason?: string, created: number}>}
   */
  outgoing(conv) {
    const tl = this.tls.get(conv);
    const shown = (seq) => tl && tl.events.has(seq);
    const out = [];
    for (const it of this.items.values()) {
      if (it.conv !== conv || it.kind !== "send" || it.state === "draft") continue;
      const claimed = this.claims.get(it.cmid);
      if (claimed && shown(claimed)) continue;
      out.push(it);
    }
    for (const [cmid, s] of this.sent) {
      if (s.item.conv !== conv || s.item.kind !== "send" || this.items.has(cmid)) continue;
      if (shown(s.seq)) continue;
      out.push({ ...s.item, state: "sent", seq: s.seq });
    }
    return out.sort((a, b) => a.created - b.created);
  }

  outboxChanged(c) {
    if (c.type === "progress") {
      this.progress.set(c.key, { sent: c.sent, size: c.size });
      this.emit("upload", c);
    } else if (c.type === "added" || c.type === "updated") {
      if (!c.item.kind) c.item.kind = "send"; // an item written before edits existed
      const was = this.items.get(c.item.cmid);
      this.items.set(c.item.cmid, c.item);
      if (c.item.state === "draft" || (was && was.state === "draft")) this.emit("draft", c.item.conv);
      this.outboxEmit(c.item);
      this.filesChanged(c.item);
      if (c.type === "added" || (c.item.state === "pending" && filesReady(c.item))) this.pump();
    } else if (c.type === "removed") {
      const it = this.items.get(c.cmid);
      this.items.delete(c.cmid);
      this.claims.delete(c.cmid);
      for (const f of (it && it.files) || []) this.progress.delete(f.key);
      if (it && it.state === "draft") this.emit("draft", it.conv);
      if (it && it.kind !== "send") {
        this.outboxEmit(it);
        const tl = this.tls.get(it.conv);
        if (tl && tl.state === "ready" && c.seq > tl.hi) this.syncForward(tl);
      } else if (it && c.seq) {
        this.sent.set(c.cmid, { item: it, seq: c.seq });
        // Forget confirmations once their event had time to arrive.
        setTimeout(() => this.sent.delete(c.cmid), 10 * 60 * 1000);
        const tl = this.tls.get(it.conv);
        if (tl && tl.state === "ready" && c.seq > tl.hi) this.syncForward(tl);
      }
      if (it) this.emit("timeline", it.conv, { kind: "outbox" });
    }
  }

  /** outboxEmit announces an item's change: a send to its conversation's outgoing list, an edit or reaction as an update of its message. */
  outboxEmit(it) {
    if (it.kind === "send") return this.emit("timeline", it.conv, { kind: "outbox" });
    const tl = this.tls.get(it.conv);
    const target = tl && tl.events.get(it.target);
    if (target) this.emit("timeline", it.conv, { kind: "update", ev: target });
    if (this.th && this.th.conv === it.conv && this.th.events.has(it.target)) this.emit("thread", this.th);
  }

  /**
   * send writes a message to the outbox (durably) and starts sending it.
   * @param {string} conv
   * @param {string} body
   * @param {number} [replyTo] the message it replies to (its thread)
   * @returns {Promise<object>} the outbox item
   */
  async send(conv, body, replyTo) {
    const tl = this.tls.get(conv);
    if (tl && tl.hasNewer) this.openTimeline(conv); // a detached timeline goes back to the newest page, where the message will show
    const d = this.draft(conv, replyTo);
    if (d && d.files && d.files.length) {
      // The draft's files go with the text: it becomes the message, sent once they are up.
      const it = await this.serialDraft(() => this.outbox.change(d.cmid, (cur) => (cur.state === "draft" ? { ...cur, body, state: "pending", created: this.outbox.stamp() } : null)));
      if (it) return it;
    }
    return this.enqueue(conv, body, replyTo ? { kind: "send", reply_to: replyTo } : undefined);
  }

  // --- attached files ---

  /**
   * draft returns the conversation's (or thread's) draft: the item holding
   * the files attached in its composer, not sent yet.
   * @param {string} conv
   * @param {number} [replyTo]
   * @returns {object|undefined}
   */
  draft(conv, replyTo) {
    for (const it of this.items.values()) {
      if (it.state === "draft" && it.conv === conv && (it.reply_to || 0) === (replyTo || 0)) return it;
    }
    return undefined;
  }

  serialDraft(fn) {
    const p = this.draftChain.then(fn, fn);
    this.draftChain = p.catch(() => {});
    return p;
  }

  /**
   * attach adds files to the draft of a conversation (or thread, replyTo),
   * kept in the outbox with their bytes, and starts uploading them.
   * @param {string} conv
   * @param {number} replyTo 0: the conversation's composer
   * @param {File[]} files
   * @returns {Promise<object>} the draft
   */
  attach(conv, replyTo, files) {
    return import("./upload.js").then((m) => m.attach(this, conv, replyTo, files));
  }

  /**
   * detach removes a file from a draft (its bytes from the browser, its
   * upload from the server); a draft left without files is dropped.
   * @param {string} cmid the draft
   * @param {string} key the file
   */
  detach(cmid, key) {
    return import("./upload.js").then((m) => m.detach(this, cmid, key));
  }

  /**
   * redraft puts a failed message's files back into its conversation's
   * draft ("Edit and send as new"); the text is the caller's to put back.
   * @param {string} cmid
   */
  redraft(cmid) {
    return import("./upload.js").then((m) => m.redraft(this, cmid));
  }

  /** filesChanged starts the uploads when an item has files left to upload. */
  filesChanged(it) {
    if (!(it.state === "pending" || it.state === "draft") || filesReady(it)) return;
    if (this.uploader) return this.uploader.kick();
    import("./upload.js").then((m) => {
      if (!this.uploader && !this.stopped) {
        this.uploader = new m.Uploader(this.outbox, {
          ready: () => this.pump(),
          auth: (e) => this.emit("auth", e.code, e.detail),
        });
      }
      if (this.uploader) this.uploader.kick();
    }, (e) => console.error("upload.js", e));
  }

  enqueue(conv, body, what) {
    if (!this.outbox) throw Object.assign(new ApiError("UNAVAILABLE", 0, "this browser's storage (IndexedDB) is not available", 0), { sentence: t("chat.noStorage") });
    return this.outbox.add(conv, body, what); // "added" starts the pump
  }

  /**
   * edit writes an edit of one of the user's messages to the outbox.
   * @param {string} conv
   * @param {number} seq the message
   * @param {string} body the new text
   */
  async edit(conv, seq, body) {
    return this.enqueue(conv, body, { kind: "edit", target: seq });
  }

  /**
   * react writes a reaction (on) or its removal (off) to the outbox.
   * @param {string} conv
   * @param {number} seq the message
   * @param {string} emoji
   * @param {boolean} on
   */
  async react(conv, seq, emoji, on) {
    return this.enqueue(conv, "", { kind: "react", target: seq, emoji, on });
  }

  /**
   * pending returns what the outbox still holds for a message: the newest
   * edit's text (or null) and the wanted state of each emoji.
   * @param {string} conv
   * @param {number} seq
   * @returns {{body: string|null, reactions: Map<string, boolean>}}
   */
  pending(conv, seq) {
    const out = { body: null, reactions: new Map() };
    const its = [...this.items.values()].filter((it) => it.conv === conv && it.target === seq && it.state === "pending");
    for (const it of its.sort((a, b) => a.created - b.created)) {
      if (it.kind === "edit") out.body = it.body;
      else if (it.kind === "react") out.reactions.set(it.emoji, it.on);
    }
    return out;
  }

  /** frame is the request an outbox item sends. */
  frame(it) {
    if (it.kind === "edit") return { t: "edit", conv: it.conv, target: it.target, cmid: it.cmid, body: it.body };
    if (it.kind === "react") return { t: "react", conv: it.conv, target: it.target, emoji: it.emoji, on: it.on, cmid: it.cmid };
    const f = { t: "send", conv: it.conv, cmid: it.cmid, body: it.body };
    if (it.reply_to) f.reply_to = it.reply_to;
    if (it.files && it.files.length) f.attachments = it.files.map((x) => x.file.id);
    return f;
  }

  /**
   * dismiss drops a failed or expired item the user is done with.
   * @param {string} cmid
   */
  async dismiss(cmid) {
    const it = this.items.get(cmid);
    if (it && it.state !== "pending") await this.outbox.remove(cmid);
  }

  /** pump sends the pending items, oldest first, while this tab holds the outbox lock. */
  async pump() {
    if (!this.outbox || this.stopped) return;
    if (this.pumping) {
      this.pumpAgain = true;
      return;
    }
    this.pumping = true;
    try {
      await this.outbox.exclusive(async () => {
        do {
          this.pumpAgain = false;
          const items = (await this.outbox.list()).filter((it) => it.state === "pending" && filesReady(it));
          for (const it of items) {
            if (!this.conn.online() || this.stopped) return;
            let r;
            try {
              r = await this.conn.request(this.frame(it));
            } catch (e) {
              if (RETRYABLE.has(e.code)) {
                this.retryLater(e);
                return;
              }
              const cur = await this.outbox.get(it.cmid);
              if (!cur) continue;
              if (cur.kind !== "send") {
                // An edit or reaction is not written again by hand: drop it, say why.
                await this.outbox.remove(it.cmid);
                this.emit("refused", cur, e);
                continue;
              }
              if (e.code === "ORIGINAL_EXPIRED") await this.outbox.put({ ...cur, state: "expired", reason: e.message });
              else if (e.code === "NOT_FOUND" && cur.files && cur.files.length && !cur.uploadedAgain) {
                // An upload left unsent too long was deleted: send the bytes kept here again, once.
                await this.outbox.put({ ...cur, uploadedAgain: true, files: cur.files.map((f) => ({ ...f, upload: undefined, file: undefined })) });
              } else await this.outbox.put({ ...cur, state: "failed", code: e.code, reason: e.message });
              continue;
            }
            this.retry.reset();
            await this.outbox.remove(it.cmid, { conv: r.conv, seq: r.seq });
          }
        } while (this.pumpAgain);
      });
    } finally {
      this.pumping = false;
    }
  }

  /** retryLater pumps again after the server's retry_after_ms, else after the next backoff wait. */
  retryLater(err) {
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => this.pump(), retryDelay(err, this.retry.next()));
  }

  // --- recall and read ---

  /**
   * recall asks the server to recall one of the user's messages.
   * @param {string} conv
   * @param {number} seq
   * @returns {Promise<object>} the recalled reply
   * @throws {ApiError} e.g. NOT_SENDER, RECALL_WINDOW_EXPIRED
   */
  async recall(conv, seq) {
    const cmid = newID();
    let r;
    if (this.conn.online()) r = await this.conn.request({ t: "recall", conv, target: seq, cmid });
    else r = await api("POST", url.recall(conv), { target: seq }, { "Idempotency-Key": cmid });
    const tl = this.tls.get(conv);
    if (tl) this.syncForward(tl);
    return r;
  }

  /**
   * markRead moves the user's read cursor forward to seq (never back).
   * @param {string} conv
   * @param {number} seq
   */
  async markRead(conv, seq) {
    const c = this.convMap.get(conv);
    if (!c || seq <= c.read) {
      this.readWanted.delete(conv);
      return;
    }
    if (!this.conn.online()) {
      this.readWanted.set(conv, Math.max(seq, this.readWanted.get(conv) || 0));
      return;
    }
    try {
      const r = await this.conn.request({ t: "read", conv, seq });
      this.readWanted.delete(conv);
      if (r.read > c.read) {
        c.read = r.read;
        this.recountUnread(c);
        this.emit("convs");
      }
    } catch (e) {
      if (RETRYABLE.has(e.code)) this.readWanted.set(conv, Math.max(seq, this.readWanted.get(conv) || 0));
    }
  }

  // --- threads, versions, direct messages ---

  /**
   * openThread loads the thread of root (the root and its replies) as the
   * one open thread; "thread" is announced on every change.
   * @param {string} conv
   * @param {number} root
   * @returns {object} the thread: {conv, root, events: Map<seq, ev>, state, error?}
   */
  openThread(conv, root) {
    if (this.th && this.th.conv === conv && this.th.root === root) return this.th;
    this.th = { conv, root, events: new Map(), state: "loading", error: null, chain: Promise.resolve() };
    this.loadThread(this.th);
    return this.th;
  }

  /** closeThread forgets the open thread. */
  closeThread() {
    this.th = null;
  }

  /**
   * loadThread reads the whole thread again (after opening, a reconnect, a
   * resync: a reply edited meanwhile is read as it is now).
   */
  loadThread(th) {
    return this.serial(th, async () => {
      if (this.th !== th) return;
      const events = new Map();
      let after = 0;
      try {
        for (let i = 0; i < 100; i++) {
          const page = await this.sync(th.conv, after, FORWARD_LIMIT, 0, th.root);
          for (const ev of page.events || []) if (!events.has(ev.seq)) events.set(ev.seq, ev);
          after = page.next_after;
          if (!page.has_more) break;
        }
      } catch (e) {
        th.error = e;
        if (th.state === "loading") th.state = "error";
        this.emit("thread", th);
        return;
      }
      // Pushes that came while reading: fold them on the fresh state.
      for (const ev of th.events.values()) {
        if (!events.has(ev.seq)) {
          events.set(ev.seq, ev);
          fold(events, ev, this.user);
        }
      }
      th.events = events;
      th.state = "ready";
      th.error = null;
      this.emit("thread", th);
    });
  }

  /** threadPush applies a pushed event to the open thread: a reply, or an edit, reaction or recall of one of its messages. */
  threadPush(ev) {
    const th = this.th;
    if (!th || th.conv !== ev.conv || th.events.has(ev.seq)) return;
    const belongs = ev.kind === "message" ? ev.reply_to === th.root : th.events.has(ev.target);
    if (!belongs) return;
    th.events.set(ev.seq, { ...ev });
    fold(th.events, th.events.get(ev.seq), this.user);
    this.emit("thread", th);
  }

  /**
   * versions reads a message's versions: the original and every edit.
   * @param {string} conv
   * @param {number} seq
   * @returns {Promise<{recalled: boolean, versions: Array<{seq: number, body: string, at: string}>}>}
   */
  versions(conv, seq) {
    return api("GET", url.versions(conv, seq));
  }

  /**
   * search reads one page of the messages matching query q that the user
   * may read, newest first (docs/protocol.md#search): over the socket
   * when it is up, else over HTTP.
   * @param {string} q
   * @param {{conv?: string, cursor?: string, limit?: number}} [opts]
   * @returns {Promise<{hits: Array<{ev: object, highlights: Array<{start: number, end: number}>}>, next?: string}>}
   * @throws {ApiError} INVALID_ARGUMENT (the detail says what is wrong with the query), NOT_MEMBER, UNAVAILABLE
   */
  search(q, opts) {
    const o = opts || {};
    const limit = o.limit || 20;
    if (this.conn.online()) {
      const f = { t: "search", q, limit };
      if (o.conv) f.conv = o.conv;
      if (o.cursor) f.cursor = o.cursor;
      return this.conn.request(f);
    }
    return api("GET", url.search(q, o.conv, limit, o.cursor));
  }

  /**
   * searchUsers reads a page of the user directory.
   * @param {string} q an id or email prefix
   * @param {string} [cursor] the previous page's next
   * @returns {Promise<{users: Array<{id: string}>, next?: string}>}
   */
  async searchUsers(q, cursor) {
    const r = await api("GET", url.users(q, 20, cursor));
    for (const u of (r && r.users) || []) setName(u.id, u.display_name || "");
    return r;
  }

  /**
   * openDirect opens (creating when needed) the direct conversation with a user.
   * @param {string} user
   * @returns {Promise<string>} its id
   */
  async openDirect(user) {
    const r = await api("POST", url.dms(), { user });
    await this.refreshConversations().catch(() => {});
    return r.id || r.conv || "dm:" + [this.user, user].sort().join(":");
  }
}

/** filesReady reports whether every file of an item is uploaded (an item without files is). */
export function filesReady(it) {
  return (it.files || []).every((f) => f.file && f.file.id);
}

/** sameFiles reports whether an own event carries exactly the files of an outbox item. */
function sameFiles(it, ev) {
  const a = (it.files || []).map((f) => f.file && f.file.id).join(",");
  const b = (ev.attachments || []).map((x) => x.id).join(",");
  return a === b;
}
