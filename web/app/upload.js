// upload.js owns the uploads of files attached to messages: a tus 1.0
// client (docs/protocol.md#uploads: creation, PATCH in chunks, HEAD to
// resume, DELETE) and the Uploader, which uploads every file the outbox
// holds, one at a time, in the tab that holds the browser-wide upload lock.
// It is loaded when the first file is attached or found in the outbox, not
// with the page. It promises:
//   - a file's bytes come from the outbox (IndexedDB keeps the Blob), so an
//     upload resumes after a reload, a crash or an offline period without
//     the user picking the file again: from the upload's HEAD offset when
//     the server still has it, else from a new creation;
//   - the upload URL is written to the outbox item before the first byte is
//     sent, and the finished file (its id) as soon as the server answers it;
//   - UNAVAILABLE, RATE_LIMITED and network errors are retried with the
//     outbox's backoff (or the server's Retry-After); a terminal refusal
//     (TOO_LARGE, a bad name) marks the file, and a pending message with it
//     failed, with a sentence, never a bare code;
//   - progress is announced to every tab (not stored: after a reload it
//     starts again from the server's offset).

import { ApiError, RETRYABLE } from "./api.js";
import { Backoff, retryDelay } from "./backoff.js";
import { humanSize } from "./bytes.js";
import { newID } from "./id.js";
import { url } from "./urls.js";
import { t, errorText } from "./i18n.js";

/** The bytes one PATCH carries (the last one may carry fewer). */
export const CHUNK = 4 << 20;

const TUS = { "Tus-Resumable": "1.0.0" };
const AUTH_ENDED = new Set(["UNAUTHENTICATED", "STALE_INSTALL"]);

/** b64 encodes a string's UTF-8 bytes in base64 (tus metadata). */
function b64(s) {
  let bin = "";
  for (const b of new TextEncoder().encode(s)) bin += String.fromCharCode(b);
  return btoa(bin);
}

/**
 * request sends one tus request with XMLHttpRequest (fetch reports no
 * upload progress) and resolves with the XHR once answered 2xx.
 * @throws {ApiError} the problem's code; a network failure is UNAVAILABLE
 */
function request(method, path, headers, body, onProgress) {
  return new Promise((resolve, reject) => {
    const x = new XMLHttpRequest();
    x.open(method, path);
    x.withCredentials = true;
    for (const [k, v] of Object.entries({ ...TUS, ...headers })) x.setRequestHeader(k, v);
    if (onProgress) x.upload.onprogress = (e) => onProgress(e.loaded);
    x.onerror = x.onabort = x.ontimeout = () => reject(new ApiError("UNAVAILABLE", 0, "network error", 0));
    x.onload = () => {
      if (x.status >= 200 && x.status < 300) return resolve(x);
      let p = null;
      try {
        p = JSON.parse(x.responseText);
      } catch {
        p = null;
      }
      const ra = Number(x.getResponseHeader("Retry-After"));
      const code = (p && p.code) || (x.status === 401 ? "UNAUTHENTICATED" : x.status === 413 ? "TOO_LARGE" : "UNAVAILABLE");
      reject(new ApiError(code, x.status, (p && p.detail) || x.statusText, Number.isFinite(ra) ? ra * 1000 : 0));
    };
    x.send(body === undefined ? null : body);
  });
}

function fileOf(x) {
  if (!x.responseText) return null;
  try {
    const f = JSON.parse(x.responseText);
    return f && f.id ? f : null;
  } catch {
    return null;
  }
}

/**
 * create starts an upload of size bytes named name.
 * @returns {Promise<{location: string, file: object|null}>} the upload's URL; the file when it is ready at once (an empty file)
 */
export async function create(name, size) {
  const x = await request("POST", url.uploads(), { "Upload-Length": String(size), "Upload-Metadata": "filename " + b64(name) });
  const loc = x.getResponseHeader("Location");
  if (!loc) throw new ApiError("UNAVAILABLE", x.status, "the upload has no Location", 0);
  return { location: new URL(loc, new URL(url.uploads(), location.href)).pathname, file: fileOf(x) };
}

/** head reads how many bytes of an upload the server has. */
export async function head(loc) {
  const x = await request("HEAD", loc, {});
  return { offset: Number(x.getResponseHeader("Upload-Offset")), length: Number(x.getResponseHeader("Upload-Length")) };
}

/**
 * patch sends bytes from offset; onProgress(n) gets the bytes of this
 * request sent so far.
 * @returns {Promise<{offset: number, file: object|null}>} the new offset; the file once the last byte is in
 */
export async function patch(loc, offset, bytes, onProgress) {
  const x = await request("PATCH", loc, { "Upload-Offset": String(offset), "Content-Type": "application/offset+octet-stream" }, bytes, onProgress);
  return { offset: Number(x.getResponseHeader("Upload-Offset")), file: fileOf(x) };
}

/** cancel deletes an upload the user no longer wants (best effort). */
export function cancel(loc) {
  return request("DELETE", loc, {}).catch(() => {});
}

/** maxSize asks the server's max_file_size (OPTIONS Tus-Max-Size); 0 when unknown. */
async function maxSize() {
  try {
    const x = await request("OPTIONS", url.uploads(), {});
    return Number(x.getResponseHeader("Tus-Max-Size")) || 0;
  } catch {
    return 0;
  }
}

/**
 * refusal turns a terminal refusal of a file into a sentence for the user.
 * @param {object} f the file's entry (name, size)
 * @param {ApiError} e
 * @returns {Promise<string>}
 */
export async function refusal(f, e) {
  const name = f.name;
  const size = humanSize(f.size);
  if (e.code === "TOO_LARGE") {
    const max = await maxSize();
    if (max && f.size > max) return t("chat.fileTooLarge", { name, size, max: humanSize(max) });
    return t("chat.fileOverQuota", { name, size });
  }
  if (e.code === "INVALID_ARGUMENT") return t("chat.fileRefused", { name });
  return t("chat.fileFailed", { name, reason: errorText(e) });
}

// --- the drafts of the Client (store.js), whose methods call these ---

/** attach is Client.attach. */
export function attach(client, conv, replyTo, files) {
  if (!client.outbox) return Promise.reject(Object.assign(new ApiError("UNAVAILABLE", 0, "this browser's storage (IndexedDB) is not available", 0), { sentence: t("chat.noStorage") }));
  const blobs = files.map((f) => ({ key: newID(), blob: f }));
  const entries = blobs.map(({ key, blob }) => ({ key, name: blob.name || "pasted", size: blob.size, type: blob.type || "", lastModified: blob.lastModified || Date.now() }));
  return client.serialDraft(async () => {
    const d = client.draft(conv, replyTo);
    if (d) {
      const it = await client.outbox.change(d.cmid, (cur) => (cur.state === "draft" ? { ...cur, files: [...(cur.files || []), ...entries] } : null), blobs);
      if (it) return it;
    }
    return client.outbox.add(conv, "", { kind: "send", state: "draft", reply_to: replyTo || undefined, files: entries }, blobs);
  });
}

/** detach is Client.detach. */
export function detach(client, cmid, key) {
  return client.serialDraft(async () => {
    const d = client.items.get(cmid);
    const f = d && (d.files || []).find((x) => x.key === key);
    if (!f) return;
    if (d.files.length === 1 && d.state === "draft") await client.outbox.remove(cmid);
    else await client.outbox.change(cmid, (cur) => ({ ...cur, files: (cur.files || []).filter((x) => x.key !== key) }));
    if (f.upload) cancel(f.upload);
  });
}

/** redraft is Client.redraft: the failed item becomes the draft, or its files move into the draft there is. */
export function redraft(client, cmid) {
  return client.serialDraft(async () => {
    const it = client.items.get(cmid);
    if (!it || it.state === "pending" || it.state === "draft") return;
    const d = client.draft(it.conv, it.reply_to);
    if (d) await moveFiles(client.outbox, cmid, d.cmid);
    else await client.outbox.change(cmid, (cur) => ({ ...cur, body: "", state: "draft", reason: undefined, created: client.outbox.stamp() }));
  });
}

/** moveFiles moves the files of item from (their Blobs stay) to the end of item to, and drops from, in one transaction. */
async function moveFiles(outbox, from, to) {
  let moved = null;
  await outbox.tx("readwrite", (s) => {
    const a = s.get(from);
    const b = s.get(to);
    b.onsuccess = () => {
      if (!a.result || !b.result) return;
      moved = { ...b.result, files: [...(b.result.files || []), ...(a.result.files || [])] };
      s.put(moved);
      s.delete(from);
    };
  });
  if (!moved) return;
  outbox.announce({ type: "removed", cmid: from });
  outbox.announce({ type: "updated", item: moved });
}

/**
 * setFile changes one file's entry of an item (its upload URL, its ready
 * file, its refusal); with fail, a pending item whose file was refused
 * becomes failed with the refusal as its reason.
 * @returns {Promise<boolean>} false when the item or the file is gone
 */
async function setFile(outbox, cmid, key, patch, fail) {
  const it = await outbox.change(cmid, (cur) => {
    if (!(cur.files || []).some((f) => f.key === key)) return null;
    const files = cur.files.map((f) => (f.key === key ? { ...f, ...patch } : f));
    const failed = fail && cur.state === "pending" && patch.error;
    return { ...cur, files, ...(failed ? { state: "failed", reason: patch.error } : {}) };
  });
  return !!it;
}

/** Uploader uploads the files of the outbox's items; the Client makes one. */
export class Uploader {
  /**
   * @param {object} outbox the Outbox (outbox.js)
   * @param {{ready: function(): void, auth: function(ApiError): void}} hooks ready: a file finished (the pump may send); auth: the session ended
   */
  constructor(outbox, hooks) {
    this.outbox = outbox;
    this.hooks = hooks;
    this.backoff = new Backoff();
    this.running = false;
    this.again = false;
    this.timer = 0;
    this.stopped = false;
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  /** kick uploads what the outbox holds (again, after the current pass). */
  kick() {
    if (this.stopped) return;
    if (this.running) {
      this.again = true;
      return;
    }
    clearTimeout(this.timer);
    this.running = true;
    const pass = () => this.pass();
    const locked = navigator.locks && navigator.locks.request
      ? navigator.locks.request("parley-uploads-" + this.outbox.user, pass)
      : pass();
    locked.catch((e) => console.error("upload", e)).finally(() => {
      this.running = false;
      if (this.again) {
        this.again = false;
        this.kick();
      }
    });
  }

  /** pass uploads every file left, oldest item first, until none is or an error says to wait. */
  async pass() {
    for (;;) {
      this.again = false;
      const todo = next(await this.outbox.list());
      if (!todo || this.stopped) return;
      try {
        await this.upload(todo.item, todo.file);
        this.backoff.reset();
      } catch (e) {
        if (AUTH_ENDED.has(e.code)) return this.hooks.auth(e);
        // Only the server refuses a file for good; anything else (a storage
        // error of this browser) is tried again.
        if (!(e instanceof ApiError) || RETRYABLE.has(e.code) || e.code === "CURSOR_AHEAD") {
          if (!(e instanceof ApiError)) console.error("upload", e);
          this.timer = setTimeout(() => this.kick(), retryDelay(e, this.backoff.next()));
          return;
        }
        await this.refused(todo.item.cmid, todo.file, e);
      }
    }
  }

  /** upload sends one file's bytes: resumed from the server's offset, or from a new creation. */
  async upload(it, f) {
    const blob = await this.outbox.blob(f.key);
    if (!blob) {
      await setFile(this.outbox, it.cmid, f.key, { error: t("chat.fileLost", { name: f.name }) }, true);
      return;
    }
    let loc = f.upload;
    let offset = 0;
    if (loc) {
      try {
        const h = await head(loc);
        offset = h.offset;
      } catch (e) {
        if (e.code !== "NOT_FOUND") throw e;
        loc = null; // expired or collected: start over with the bytes kept here
      }
    }
    if (!loc) {
      const c = await create(f.name, blob.size);
      loc = c.location;
      if (!(await this.setFile(it.cmid, f.key, { upload: loc, file: c.file || undefined }))) return cancel(loc);
      if (c.file) return this.hooks.ready();
    }
    for (;;) {
      this.progress(it.cmid, f.key, offset, blob.size);
      const cur = await this.outbox.get(it.cmid);
      if (!cur || !(cur.files || []).some((x) => x.key === f.key)) return cancel(loc); // removed meanwhile
      const from = offset;
      const r = await patch(loc, from, blob.slice(from, Math.min(blob.size, from + CHUNK)), (n) => this.progress(it.cmid, f.key, from + n, blob.size));
      offset = r.offset;
      if (r.file) {
        await this.setFile(it.cmid, f.key, { file: r.file });
        this.progress(it.cmid, f.key, blob.size, blob.size);
        return this.hooks.ready();
      }
    }
  }

  progress(cmid, key, sent, size) {
    const now = Date.now();
    if (sent < size && now - (this.lastProgress || 0) < 100) return;
    this.lastProgress = now;
    this.outbox.progress({ cmid, key, sent, size });
  }

  setFile(cmid, key, change) {
    return setFile(this.outbox, cmid, key, change);
  }

  /** refused marks a file refused for good, with a sentence; a pending message with it fails with the same sentence. */
  async refused(cmid, f, e) {
    const why = await refusal(f, e);
    await setFile(this.outbox, cmid, f.key, { error: why }, true);
  }
}

/** next is the first file to upload: of the oldest item (drafts too) that has one neither uploaded nor refused. */
function next(items) {
  for (const it of items) {
    if (it.state !== "pending" && it.state !== "draft") continue;
    for (const f of it.files || []) if (!f.file && !f.error) return { item: it, file: f };
  }
  return null;
}
