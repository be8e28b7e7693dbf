// outbox.js owns the browser's outbox: the messages the user wrote that the
// server has not confirmed yet, kept in IndexedDB (one database per user)
// so they survive a reload, a crash of the tab and an offline period. It
// promises:
//   - add() writes the item (a fresh cmid, the conversation, the body) and
//     resolves only once the write is durable: callers send after it;
//   - items stay until remove(); failed ones keep their reason;
//   - every change is announced to the other tabs of this browser
//     (BroadcastChannel) and to this tab (onChange), with what happened;
//   - exclusive() runs a function while holding the browser-wide outbox lock
//     (Web Locks), so only one tab sends at a time.
// Item: {cmid, conv, body, created (ms), state: "pending"|"failed"|"expired",
// reason?} and what it asks: kind "send" (reply_to?), "edit" (target, body)
// or "react" (target, emoji, on).

import { newID } from "./id.js";

const STORE = "outbox";

function req(r) {
  return new Promise((resolve, reject) => {
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
}

/** Outbox is one user's outbox in this browser. */
export class Outbox {
  /**
   * open opens (creating when needed) the outbox of a user.
   * @param {string} user
   * @returns {Promise<Outbox>}
   */
  static async open(user) {
    const r = indexedDB.open("parley-" + user, 1);
    r.onupgradeneeded = () => {
      const s = r.result.createObjectStore(STORE, { keyPath: "cmid" });
      s.createIndex("created", "created");
    };
    const db = await req(r);
    return new Outbox(db, user);
  }

  constructor(db, user) {
    this.db = db;
    this.user = user;
    this.listeners = [];
    this.chan = typeof BroadcastChannel !== "undefined" ? new BroadcastChannel("parley-outbox-" + user) : null;
    if (this.chan) this.chan.onmessage = (m) => this.emit(m.data, true);
  }

  close() {
    if (this.chan) this.chan.close();
    this.db.close();
  }

  tx(mode, fn) {
    return new Promise((resolve, reject) => {
      const t = this.db.transaction(STORE, mode, { durability: "strict" });
      let out;
      t.oncomplete = () => resolve(out);
      t.onerror = () => reject(t.error);
      t.onabort = () => reject(t.error || new Error("outbox transaction aborted"));
      out = fn(t.objectStore(STORE));
    });
  }

  /**
   * onChange registers fn(change, remote) for changes: {type: "added"|"updated"|"removed", item?, cmid?, seq?}.
   * @param {function(object, boolean)} fn
   */
  onChange(fn) {
    this.listeners.push(fn);
  }

  emit(change, remote) {
    for (const fn of this.listeners) fn(change, remote);
  }

  announce(change) {
    if (this.chan) this.chan.postMessage(change);
    this.emit(change, false);
  }

  /**
   * add stores a new pending item and resolves once it is written.
   * @param {string} conv
   * @param {string} body
   * @param {{kind?: string, target?: number, emoji?: string, on?: boolean, reply_to?: number}} [what] default a send
   * @returns {Promise<object>} the item
   */
  async add(conv, body, what) {
    // created orders the items: strictly increasing in this tab, so two
    // messages written in one millisecond keep their order.
    this.last = Math.max(Date.now(), (this.last || 0) + 1);
    const item = { kind: "send", ...what, cmid: newID(), conv, body, created: this.last, state: "pending" };
    await this.tx("readwrite", (s) => s.add(item));
    this.announce({ type: "added", item });
    return item;
  }

  /**
   * put rewrites an item (a new state, a reason).
   * @param {object} item
   */
  async put(item) {
    await this.tx("readwrite", (s) => s.put(item));
    this.announce({ type: "updated", item });
  }

  /**
   * remove drops an item: the server has it (seq given) or the user dismissed it.
   * @param {string} cmid
   * @param {{conv?: string, seq?: number}} [sent] what the server answered
   */
  async remove(cmid, sent) {
    await this.tx("readwrite", (s) => s.delete(cmid));
    this.announce({ type: "removed", cmid, conv: sent && sent.conv, seq: sent && sent.seq });
  }

  /**
   * get reads one item.
   * @param {string} cmid
   * @returns {Promise<object|undefined>}
   */
  async get(cmid) {
    let r;
    await this.tx("readonly", (s) => {
      r = s.get(cmid);
    });
    return r.result;
  }

  /**
   * list returns every item, oldest first.
   * @returns {Promise<object[]>}
   */
  async list() {
    let r;
    await this.tx("readonly", (s) => {
      r = s.index("created").getAll();
    });
    return r.result;
  }

  /**
   * exclusive runs fn while this tab holds the outbox lock of the user in
   * this browser; without the Web Locks API (an insecure context) it runs
   * fn at once: resends are still safe (same cmid), only two tabs may then
   * send the same item concurrently.
   * @param {function(): Promise<*>} fn
   */
  exclusive(fn) {
    if (navigator.locks && navigator.locks.request) {
      return navigator.locks.request("parley-outbox-" + this.user, fn);
    }
    return fn();
  }
}
