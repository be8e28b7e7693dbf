// live.js holds the live signals of a session, loaded once it started (a
// dynamic import, so it costs nothing on the first load):
//   - typing: while the user writes in a composer, {"t":"typing","conv"}
//     goes to the server at most once per 3 s per conversation; a typing
//     push from someone else shows "ben is typing…" under that
//     conversation's timeline until its `until` (5 s at most when the
//     clocks disagree) or until that user's message arrives;
//   - presence: every user shown by name (names.js's elements) gets a dot:
//     online, away or offline, from GET /api/presence (asked for the users
//     on the page, at most 100 at a time, and again after a reconnect) and
//     the presence pushes; the user's own state goes to the server: away
//     after 5 minutes without input or while the page is hidden, online on
//     the next input;
//   - desktop notifications while the page is open (views/notify.js);
//   - the conversation list is kept in IndexedDB (parley-convs-USER, as
//     last read from the server), so a start without the server shows it;
//     signing out deletes it;
//   - Web Push: once notifications are allowed, the browser subscribes
//     (the server's VAPID key) and registers the subscription with the
//     server; a server without push (404) is skipped quietly; signing out
//     unsubscribes it. A click on a notification (the service worker)
//     opens its conversation here.

import { api } from "./api.js";
import { url } from "./urls.js";
import { nameOf } from "./names.js";
import { t } from "./i18n.js";
import { notifyArrivals } from "./views/notify.js";

/** Typing frames per conversation: at most one per this many ms. */
export const TYPING_EVERY_MS = 3000;
/** A typing line shows at most this long when the clocks disagree. */
const TYPING_SHOW_MS = 5000;
/** Without input for this long the user is away. */
export const IDLE_MS = 5 * 60 * 1000;

/**
 * typingText says who is typing.
 * @param {string[]} names
 * @returns {string}
 */
export function typingText(names) {
  if (!names.length) return "";
  if (names.length === 1) return t("app.typing.one", { name: names[0] });
  if (names.length === 2) return t("app.typing.two", { a: names[0], b: names[1] });
  return t("app.typing.many", { n: names.length });
}

/**
 * showFor is how long a typing line shows for `until` (RFC 3339), read
 * at now: until - now, or 5 s when that is not in (0, 10 s].
 * @param {string} until
 * @param {number} now ms
 * @returns {number} ms
 */
export function showFor(until, now) {
  const ms = Date.parse(until) - now;
  return ms > 0 && ms <= 2 * TYPING_SHOW_MS ? ms : TYPING_SHOW_MS;
}

/**
 * start runs the live signals of a session until the returned stop is called.
 * @param {{client: object, me: object, navigate: Function, h: Function}} ctx
 * @returns {function(): void}
 */
export function start(ctx) {
  const parts = [kept(ctx), typing(ctx), presence(ctx), idle(ctx), push(ctx), notifyArrivals(ctx.client, (conv) => ctx.navigate("/c/" + encodeURIComponent(conv)))];
  return () => {
    for (const stop of parts) stop();
  };
}

/** kept keeps the conversation list in IndexedDB and shows it until the server's is read. */
function kept(ctx) {
  const { client } = ctx;
  const name = "parley-convs-" + client.user;
  let timer = 0;
  const db = new Promise((resolve, reject) => {
    const r = indexedDB.open(name, 1);
    r.onupgradeneeded = () => r.result.createObjectStore("kv");
    r.onsuccess = () => {
      r.result.onversionchange = () => r.result.close(); // another tab signed out: let it delete
      resolve(r.result);
    };
    r.onerror = () => reject(r.error);
  });
  const store = (d, mode) => d.transaction("kv", mode).objectStore("kv");
  db.then((d) => {
    const r = store(d, "readonly").get("convs");
    r.onsuccess = () => Array.isArray(r.result) && client.seed(r.result);
  }).catch(() => {});
  const save = () => db.then((d) => store(d, "readwrite").put(client.conversations(), "convs")).catch(() => {});
  // At once, then at most once a second: the page may go away any time.
  let again = false;
  const onConvs = () => {
    if (!client.conversationsLoaded()) return;
    if (timer) {
      again = true;
      return;
    }
    save();
    timer = setTimeout(() => {
      timer = 0;
      if (again) {
        again = false;
        onConvs();
      }
    }, 1000);
  };
  const off = client.on("convs", onConvs);
  onConvs();
  return () => {
    off();
    clearTimeout(timer);
    db.then((d) => d.close()).catch(() => {});
    indexedDB.deleteDatabase(name);
  };
}

/** typing sends the user's typing and shows the others'. */
function typing(ctx) {
  const { client, h } = ctx;
  const sent = new Map(); // conv → when the last typing frame went
  const typers = new Map(); // conv → Map(user → expiry ms)
  let timer = 0;

  const onInput = (e) => {
    const box = e.target;
    if (!(box instanceof HTMLTextAreaElement) || !/composer$/.test(box.dataset.test || "")) return;
    const view = box.closest("[data-test=conv-view]");
    const conv = view && view.dataset.conv;
    if (!conv || box.value.trim() === "") return;
    const now = Date.now();
    if (now - (sent.get(conv) || 0) < TYPING_EVERY_MS) return;
    sent.set(conv, now);
    client.signal({ t: "typing", conv });
  };
  document.addEventListener("input", onInput, true);

  function draw() {
    clearTimeout(timer);
    const now = Date.now();
    let next = Infinity;
    for (const [conv, users] of typers) {
      for (const [u, exp] of users) {
        if (exp <= now) users.delete(u);
        else next = Math.min(next, exp);
      }
      if (!users.size) typers.delete(conv);
    }
    for (const view of document.querySelectorAll("[data-test=conv-view]")) {
      const users = typers.get(view.dataset.conv);
      let line = view.querySelector(":scope > [data-test=typing]");
      if (!line) {
        line = h("p", { class: "typing muted", "data-test": "typing", "aria-live": "polite" });
        const composer = view.querySelector(":scope > form.composer");
        view.insertBefore(line, composer || null);
      }
      line.textContent = typingText(users ? [...users.keys()].map(nameOf) : []);
    }
    if (next < Infinity) timer = setTimeout(draw, next - now + 10);
  }

  const offs = [
    client.on("signal", (f) => {
      if (f.t !== "typing" || !f.conv || !f.user || f.user === client.user) return;
      if (!typers.has(f.conv)) typers.set(f.conv, new Map());
      typers.get(f.conv).set(f.user, Date.now() + showFor(f.until, Date.now()));
      draw();
    }),
    client.on("arrived", (c, ev) => {
      if (ev.kind === "message" && typers.get(c.conv)?.delete(ev.sender)) draw();
    }),
    client.on("timeline", (conv, change) => {
      // Messages read by a sync (after a gap) clear their senders too.
      for (const ev of (change.kind === "append" && change.events) || []) if (ev.kind === "message") typers.get(conv)?.delete(ev.sender);
      draw();
    }),
  ];
  return () => {
    document.removeEventListener("input", onInput, true);
    clearTimeout(timer);
    for (const off of offs) off();
  };
}

/**
 * presenceLabel names a presence state in the page's language.
 * @param {string} st "online" | "away" | "offline"
 * @returns {string}
 */
export function presenceLabel(st) {
  if (st === "online") return t("app.presence.online");
  if (st === "away") return t("app.presence.away");
  return t("app.presence.offline");
}

/** presence shows a dot by every name on the page. */
function presence(ctx) {
  const { client } = ctx;
  const states = new Map(); // user → "online" | "away" | "offline"
  const asked = new Set(); // users asked for since the last (re)connect
  let supported = true;
  let timer = 0;

  function paint(el) {
    const st = states.get(el.getAttribute("data-name-of"));
    if (st) {
      el.setAttribute("data-presence", st);
      el.title = t("app.presence.title", { id: el.getAttribute("data-name-of"), state: presenceLabel(st) });
    }
  }

  function scan() {
    timer = 0;
    const want = [];
    for (const el of document.querySelectorAll("[data-name-of]")) {
      const id = el.getAttribute("data-name-of");
      paint(el);
      if (!asked.has(id) && id !== client.user && !want.includes(id)) want.push(id);
    }
    if (!supported || !want.length || client.connState() !== "online") return;
    for (let i = 0; i < want.length; i += 100) {
      const batch = want.slice(i, i + 100);
      for (const id of batch) asked.add(id);
      api("GET", url.presence(batch.join(","))).then((r) => {
        for (const p of (r && r.presence) || []) set(p.user, p.state);
      }, (e) => {
        if (e.status === 404) supported = false;
        else for (const id of batch) asked.delete(id);
      });
    }
  }

  function set(user, state) {
    states.set(user, state);
    for (const el of document.querySelectorAll("[data-name-of]")) if (el.getAttribute("data-name-of") === user) paint(el);
  }

  const later = () => {
    if (!timer) timer = setTimeout(scan, 200);
  };
  const obs = new MutationObserver(later);
  obs.observe(document.body, { childList: true, subtree: true });
  const offs = [
    client.on("signal", (f) => {
      if (f.t === "presence" && f.user) set(f.user, f.state);
    }),
    client.on("conn", (st) => {
      if (st !== "online") return;
      asked.clear(); // pushes were missed while away: ask again
      later();
    }),
  ];
  later();
  return () => {
    obs.disconnect();
    clearTimeout(timer);
    for (const off of offs) off();
  };
}

/** idle reports the user away after IDLE_MS without input or while the page is hidden, online on input. */
function idle(ctx) {
  const { client } = ctx;
  let away = false;
  let timer = 0;
  const report = (a) => {
    if (a === away) return;
    away = a;
    client.signal({ t: "presence", state: a ? "away" : "online" });
  };
  const active = () => {
    clearTimeout(timer);
    if (document.visibilityState === "hidden") return report(true);
    report(false);
    timer = setTimeout(() => report(true), IDLE_MS);
  };
  const kinds = ["pointerdown", "keydown", "wheel", "touchstart", "focus", "visibilitychange"];
  for (const k of kinds) window.addEventListener(k, active, { capture: true, passive: true });
  const off = client.on("conn", (st) => {
    // A new socket starts online: tell it when the user is away.
    if (st === "online" && away) client.signal({ t: "presence", state: "away" });
  });
  active();
  return () => {
    clearTimeout(timer);
    for (const k of kinds) window.removeEventListener(k, active, { capture: true });
    off();
  };
}

/** push subscribes this browser to Web Push once notifications are allowed, and opens clicked notifications' conversations. */
function push(ctx) {
  let stopped = false;
  const onMessage = (m) => {
    if (m.data && m.data.t === "open" && typeof m.data.conv === "string") ctx.navigate("/c/" + encodeURIComponent(m.data.conv));
  };
  const sw = navigator.serviceWorker;
  if (sw) sw.addEventListener("message", onMessage);
  const tryIt = () => {
    if (!stopped) subscribe().catch((e) => console.warn("push subscription:", e));
  };
  tryIt();
  if (navigator.permissions) {
    navigator.permissions.query({ name: "notifications" }).then((st) => {
      st.onchange = tryIt;
    }, () => {});
  }
  return () => {
    stopped = true;
    if (!sw) return;
    sw.removeEventListener("message", onMessage);
    // Signed out: this browser's subscription ends with the session (the
    // push service then answers the server 404/410, which drops it).
    sw.getRegistration().then((r) => r && r.pushManager && r.pushManager.getSubscription()).then((s) => s && s.unsubscribe()).catch(() => {});
  };
}

/**
 * subscribe registers this browser's push subscription with the server,
 * creating it when needed (with the server's key: a subscription made
 * with another key is replaced). Nothing when notifications are not
 * allowed, the browser has no Web Push, or the server has none (404).
 */
export async function subscribe() {
  if (typeof Notification === "undefined" || Notification.permission !== "granted" || !navigator.serviceWorker || typeof PushManager === "undefined") return;
  let key;
  try {
    key = (await api("GET", url.pushKey())).key;
  } catch (e) {
    if (e.status === 404) return;
    throw e;
  }
  const reg = await navigator.serviceWorker.ready;
  const want = fromB64url(key);
  let sub = await reg.pushManager.getSubscription();
  if (sub && !sameBytes(sub.options.applicationServerKey, want)) {
    await sub.unsubscribe();
    sub = null;
  }
  if (!sub) sub = await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: want });
  try {
    await api("POST", url.pushSubs(), sub.toJSON());
  } catch (e) {
    if (e.status !== 404) throw e;
  }
}

/**
 * fromB64url decodes base64url (padding optional).
 * @param {string} s
 * @returns {Uint8Array}
 */
export function fromB64url(s) {
  const b = atob(s.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((s.length + 3) % 4));
  return Uint8Array.from(b, (c) => c.charCodeAt(0));
}

function sameBytes(a, b) {
  if (!a) return false;
  const x = new Uint8Array(a);
  return x.length === b.length && x.every((v, i) => v === b[i]);
}
