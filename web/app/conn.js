// conn.js owns the page's one WebSocket to /ws (the session cookie
// authenticates it). It promises:
//   - requests get a fresh rid and resolve with their reply frame, or
//     reject with an ApiError carrying the frame's code (RATE_LIMITED with
//     retryAfterMs from retry_after_ms); a request on a closed socket, or
//     one whose socket closes before the reply, rejects with UNAVAILABLE;
//   - after every (re)connect it subscribes (sub) before reporting "open",
//     so a listener that syncs on "open" misses no push;
//   - reconnects forever with full-jitter exponential backoff (backoff.js:
//     a random wait in [0, min(30 s, 0.5 s·2^attempt)), attempts counted
//     since the last connection that subscribed), so within 0.5 s after a
//     goaway, and without a wait when the browser comes back online; while
//     the browser says it is offline (navigator.onLine false) it waits for
//     its "online" event instead, trying only every 30 s in case that event
//     never comes, so the state stays "offline" rather than flickering
//     through "connecting";
//   - a refused upgrade is told apart by asking GET /api/me:
//     UNAUTHENTICATED / STALE_INSTALL end the connection for good ("auth"),
//     anything else is retried;
//   - the state ("connecting", "online", "offline") is always reported.

import { api, ApiError } from "./api.js";
import { Backoff, CAP_MS } from "./backoff.js";
import { url } from "./urls.js";

const REQUEST_TIMEOUT_MS = 20000;

/** Conn is the WebSocket connection with its reconnect loop. */
export class Conn {
  /**
   * @param {{onPush: function(object), onOpen: function(), onState: function(string), onAuth: function(string, string)}} hooks
   */
  constructor(hooks) {
    this.hooks = hooks;
    this.ws = null;
    this.state = "connecting";
    this.backoff = new Backoff();
    this.rid = 0;
    this.waiting = new Map(); // rid → {resolve, reject, timer}
    this.stopped = false;
    this.timer = 0;
    this.opened = false;
    this.onOnline = () => this.reconnectNow();
    this.onOffline = () => {
      const ws = this.ws;
      if (!ws) {
        this.scheduleReconnect(); // waiting to retry: now for "online"
        return;
      }
      ws.close(4000, "browser offline");
      // An offline browser may hold the close handshake, and so onclose,
      // until it is back online: the socket is given up now.
      this.lost(ws);
    };
  }

  /** start opens the socket and keeps it open until stop. */
  start() {
    window.addEventListener("online", this.onOnline);
    window.addEventListener("offline", this.onOffline);
    this.open();
  }

  /** stop closes the socket for good. */
  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    window.removeEventListener("online", this.onOnline);
    window.removeEventListener("offline", this.onOffline);
    if (this.ws) this.ws.close(1000, "signed out");
    this.failAll("connection closed");
  }

  setState(s) {
    if (this.state === s) return;
    this.state = s;
    this.hooks.onState(s);
  }

  open() {
    if (this.stopped) return;
    clearTimeout(this.timer);
    this.setState("connecting");
    let ws;
    try {
      ws = new WebSocket(url.socket());
    } catch {
      this.scheduleReconnect();
      return;
    }
    this.ws = ws;
    this.opened = false;
    ws.onopen = async () => {
      if (this.ws !== ws) return;
      try {
        await this.request({ t: "sub" });
      } catch {
        ws.close(4001, "sub failed");
        return;
      }
      if (this.ws !== ws) return;
      this.opened = true;
      this.backoff.reset();
      this.setState("online");
      this.hooks.onOpen();
    };
    ws.onmessage = (m) => {
      if (this.ws !== ws) return;
      let f;
      try {
        f = JSON.parse(m.data);
      } catch {
        return;
      }
      this.frame(f, ws);
    };
    ws.onclose = () => this.lost(ws);
  }

  /** lost gives up socket ws: its requests fail and the reconnect loop takes over. */
  lost(ws) {
    if (this.ws !== ws) return;
    this.ws = null;
    this.failAll("connection lost");
    if (this.stopped) return;
    this.setState(navigator.onLine === false ? "offline" : "connecting");
    this.checkAuthThenReconnect(!this.opened);
  }

  frame(f, ws) {
    if (f.rid !== undefined && f.rid !== null) {
      const w = this.waiting.get(String(f.rid));
      if (!w) return;
      this.waiting.delete(String(f.rid));
      clearTimeout(w.timer);
      if (f.t === "error") w.reject(new ApiError(f.code || "UNAVAILABLE", 0, f.msg || "", f.retry_after_ms || 0));
      else w.resolve(f);
      return;
    }
    if (f.t === "error") {
      if (f.code === "UNAUTHENTICATED" || f.code === "STALE_INSTALL") {
        this.stopped = true;
        ws.close(1000, "token refused");
        this.failAll("signed out");
        this.hooks.onAuth(f.code, f.msg || "");
      }
      return;
    }
    if (f.t === "goaway") {
      // The gateway drains: reconnect (the load balancer sends us elsewhere).
      ws.close(1000, "goaway");
      return;
    }
    this.hooks.onPush(f);
  }

  /** After a close: a socket that never opened may have been refused for its cookie. */
  async checkAuthThenReconnect(neverOpened) {
    if (neverOpened) {
      try {
        await api("GET", url.me());
      } catch (e) {
        if (e.code === "UNAUTHENTICATED" || e.code === "STALE_INSTALL") {
          if (this.stopped) return;
          this.stopped = true;
          this.hooks.onAuth(e.code, e.detail);
          return;
        }
      }
    }
    this.scheduleReconnect();
  }

  scheduleReconnect() {
    if (this.stopped) return;
    clearTimeout(this.timer);
    if (navigator.onLine === false) {
      // Offline: the "online" event reconnects at once (reconnectNow).
      this.setState("offline");
      this.timer = setTimeout(() => this.open(), CAP_MS);
      return;
    }
    this.timer = setTimeout(() => this.open(), this.backoff.next());
  }

  /** reconnectNow skips the backoff wait (the browser came back online). */
  reconnectNow() {
    if (this.stopped || this.ws) return;
    this.backoff.reset();
    this.open();
  }

  failAll(why) {
    for (const [, w] of this.waiting) {
      clearTimeout(w.timer);
      w.reject(new ApiError("UNAVAILABLE", 0, why, 0));
    }
    this.waiting.clear();
  }

  /**
   * request sends one request frame and waits for its reply.
   * @param {object} frame without rid
   * @returns {Promise<object>} the reply frame
   * @throws {ApiError}
   */
  request(frame) {
    const ws = this.ws;
    if (!ws || ws.readyState !== WebSocket.OPEN) {
      return Promise.reject(new ApiError("UNAVAILABLE", 0, "not connected", 0));
    }
    const rid = "r" + ++this.rid;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        if (this.waiting.delete(rid)) {
          reject(new ApiError("UNAVAILABLE", 0, "no reply", 0));
          // A socket that does not answer is broken: start over.
          if (this.ws === ws) ws.close(4002, "no reply");
        }
      }, REQUEST_TIMEOUT_MS);
      this.waiting.set(rid, { resolve, reject, timer });
      ws.send(JSON.stringify({ ...frame, rid }));
    });
  }

  /** send sends a frame that has no reply; dropped when not connected. */
  send(frame) {
    if (this.opened && this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(frame));
  }

  /** online tells whether requests can be made now. */
  online() {
    return this.state === "online";
  }
}
