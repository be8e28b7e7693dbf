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
//     (Web Locks), so only one tab sends at a time;
//   - the files attached to a message are kept with it: their Blobs in a
//     store of their own ("blobs", by file key), written in the same
//     transaction as the item and deleted with it, so an upload survives a
//     reload (upload.js).
// Item: {cmid, conv, body, created (ms), state: "draft"|"pending"|"failed"|
// "expired", reason?} and what it asks: kind "send" (reply_to?, files?),
// "edit" (target, body) or "react" (target, emoji, on). A "draft" is a
// message being written whose files are attached (and uploading) before it
// is sent: one per conversation (and thread), never sent until it is
// pending. files: [{key, name, size, type, lastModified, upload? (the tus
// URL), file? (the server's file once ready: its id is the attachment),
// error? (the sentence of a refusal)}].
//
// Schema: version 1 had the store "outbox"; version 2 adds "blobs" and
// writes kind "send" into items written before kinds existed. An upgrade
// keeps every item.

import { newID } from "./id.js";

const STORE = "outbox";
const BLOBS = "blobs";
const VERSION = 2;

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
    const r = indexedDB.open("parley-" + user, VERSION);
    r.onupgradeneeded = (e) => upgrade(r.result, r.transaction, e.oldVersion);
    r.onblocked = () => console.warn("outbox: waiting for another tab of an older page to close its database");
    const db = await req(r);
    // A newer page (another tab) upgrading the schema: let it, and reload
    // into the new release.
    db.onversionchange = () => {
      db.close();
      location.reload();
    };
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
      const t = this.db.transaction([STORE, BLOBS], mode, { durability: "strict" });
      let out;
      t.oncomplete = () => resolve(out);
      t.onerror = () => reject(t.error);
      t.onabort = () => reject(t.error || new Error("outbox transaction aborted"));
      out = fn(t.objectStore(STORE), t.objectStore(BLOBS));
    });
  }

  /**
   * change rewrites one item in one transaction: fn(item) returns the new
   * item, or null to leave it; blobs of the files fn drops are deleted.
   * Announces "updated" and resolves with the new item (null: unchanged or
   * missing).
   * @param {string} cmid
   * @param {function(object): (object|null)} fn
   * @param {Array<{key: string, blob: Blob}>} [add] Blobs to write with it
   */
  async change(cmid, fn, add) {
    let out = null;
    await this.tx("readwrite", (s, b) => {
      const r = s.get(cmid);
      r.onsuccess = () => {
        if (!r.result) return;
        const next = fn(r.result);
        if (!next) return;
        const keep = new Set((next.files || []).map((f) => f.key));
        for (const f of r.result.files || []) if (!keep.has(f.key)) b.delete(f.key);
        for (const a of add || []) b.put(a.blob, a.key);
        s.put(next);
        out = next;
      };
    });
    if (out) this.announce({ type: "updated", item: out });
    return out;
  }

  /**
   * blob reads the bytes of an attached file.
   * @param {string} key
   * @returns {Promise<Blob|undefined>}
   */
  async blob(key) {
    let r;
    await this.tx("readonly", (s, b) => {
      r = b.get(key);
    });
    return r.result;
  }

  /**
   * progress tells every tab how far an upload is (not stored).
   * @param {{cmid: string, key: string, sent: number, size: number}} p
   */
  progress(p) {
    this.announce({ type: "progress", ...p });
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
   * @param {{kind?: string, target?: number, emoji?: string, on?: boolean, reply_to?: number, state?: string, files?: object[]}} [what] default a pending send
   * @param {Array<{key: string, blob: Blob}>} [blobs] the Blobs of what.files
   * @returns {Promise<object>} the item
   */
  async add(conv, body, what, blobs) {
    const item = { kind: "send", state: "pending", ...what, cmid: newID(), conv, body, created: this.stamp() };
    await this.tx("readwrite", (s, b) => {
      for (const a of blobs || []) b.put(a.blob, a.key);
      s.add(item);
    });
    this.announce({ type: "added", item });
    return item;
  }

  /**
   * stamp is a new item's created time: strictly increasing in this tab,
   * so two messages written in one millisecond keep their order.
   * @returns {number}
   */
  stamp() {
    this.last = Math.max(Date.now(), (this.last || 0) + 1);
    return this.last;
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
    await this.tx("readwrite", (s, b) => {
      const r = s.get(cmid);
      r.onsuccess = () => {
        for (const f of (r.result && r.result.files) || []) b.delete(f.key);
        s.delete(cmid);
      };
    });
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

/** upgrade brings the database from oldVersion to VERSION, keeping every item. */
function upgrade(db, t, oldVersion) {
  if (oldVersion < 1) {
    const s = db.createObjectStore(STORE, { keyPath: "cmid" });
    s.createIndex("created", "created");
  }
  if (oldVersion < 2) {
    db.createObjectStore(BLOBS);
    if (oldVersion >= 1) {
      // Items from before kinds existed are sends.
      t.objectStore(STORE).openCursor().onsuccess = (e) => {
        const c = e.target.result;
        if (!c) return;
        if (!c.value.kind) c.update({ ...c.value, kind: "send" });
        c.continue();
      };
    }
  }
}
