// sw.js is the app's service worker, served at /sw.js (scope /) with the
// current release's manifest written into it by the server (package web),
// so its bytes change with every release and the browser installs the new
// one. It promises:
//   - install: the release's shell and every hashed asset go into one
//     cache named after the release; a shell that names other assets (a
//     gateway of another release answered) fails the install, so a cache
//     never mixes releases;
//   - a navigation to a page of the app goes to the network; only when the
//     network fails (or a proxy answers 502/503/504) does the cached shell
//     answer, so the app comes up offline;
//   - a hashed asset of the release is served from the cache (its name is
//     its content: a cached copy is never stale); anything else (the API,
//     the socket, files, exports) is not touched and never cached;
//   - activate: caches of other releases are deleted;
//   - push: the payload is a hint {conv, seq}; the message is fetched
//     through the API with the session cookie (the server checks the
//     user may read it) and shown only when that succeeds;
//   - a click on a notification focuses a page of the app (or opens one) at
//     that conversation.
"use strict";

const MANIFEST = /*MANIFEST*/ { release: "dev", shell: "/", refs: [], assets: [] };
const PREFIX = "parley-";
const CACHE = PREFIX + MANIFEST.release;

// The server's own paths: never a page of the app (httpapi/web.go).
const SERVER = /^\/(api|assets|download|hooks|exports)\/|^\/(ws|healthz|readyz|metrics|sw\.js)$/;
const FILE = /\.(m?js|css|map|json|webmanifest|txt|xml|html?|ico|png|jpe?g|gif|svg|webp|avif|woff2?|ttf|otf|wasm|pdf|zip|gz)$/i;

self.addEventListener("install", (e) => {
  e.waitUntil(install().then(() => self.skipWaiting()));
});

async function install() {
  const cache = await caches.open(CACHE);
  const shell = await fetch(MANIFEST.shell, { headers: { Accept: "text/html" }, cache: "no-store", credentials: "omit" });
  const text = await shell.clone().text();
  if (!shell.ok || !MANIFEST.refs.every((r) => text.includes('"' + r + '"'))) {
    throw new Error("the server answered the shell of another release");
  }
  await cache.addAll(MANIFEST.assets);
  await cache.put(MANIFEST.shell, shell);
}

self.addEventListener("activate", (e) => {
  e.waitUntil((async () => {
    for (const name of await caches.keys()) {
      if (name.startsWith(PREFIX) && name !== CACHE) await caches.delete(name);
    }
    await self.clients.claim();
  })());
});

self.addEventListener("fetch", (e) => {
  const req = e.request;
  if (req.method !== "GET") return;
  const u = new URL(req.url);
  if (u.origin !== location.origin) return;
  if (req.mode === "navigate" && !SERVER.test(u.pathname) && !FILE.test(u.pathname)) {
    e.respondWith(page(req));
  } else if (MANIFEST.assets.includes(u.pathname)) {
    e.respondWith(asset(req));
  }
});

async function page(req) {
  try {
    const res = await fetch(req);
    if (res.status < 502 || res.status > 504) return res;
  } catch {
    // offline, or the server is down: the cached shell below
  }
  const cached = await caches.match(MANIFEST.shell, { cacheName: CACHE });
  return cached || Response.error();
}

async function asset(req) {
  const cached = await caches.match(req, { cacheName: CACHE });
  if (cached) return cached;
  const res = await fetch(req);
  if (res.ok) {
    const copy = res.clone();
    caches.open(CACHE).then((c) => c.put(req, copy)).catch(() => {});
  }
  return res;
}

self.addEventListener("push", (e) => {
  let hint = null;
  try {
    hint = e.data ? e.data.json() : null;
  } catch {
    hint = null;
  }
  if (!hint || typeof hint.conv !== "string" || !Number.isSafeInteger(hint.seq)) return;
  e.waitUntil(notify(hint.conv, hint.seq).catch(() => {}));
});

/** notify fetches the message a hint names and shows it; nothing when the API refuses. */
async function notify(conv, seq) {
  const res = await fetch("/api/convs/" + encodeURIComponent(conv) + "/events/" + seq, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (!res.ok) return;
  const ev = (await res.json()).ev;
  if (!ev || ev.kind !== "message" || ev.recalled) return;
  const files = ev.attachments || [];
  const w = words();
  const text = ev.body || "📎 " + (files.length === 1 ? files[0].name : w.files(files.length));
  await self.registration.showNotification("Parley", { body: w.line(ev.sender, text), tag: "parley-" + conv, data: { conv, seq } });
}

// The worker cannot read the page's catalogues or its chosen language
// (localStorage); its two strings follow the browser's languages.
const WORDS = {
  en: { files: (n) => n + " files", line: (who, text) => who + ": " + text },
  zh: { files: (n) => n + " 个文件", line: (who, text) => who + "：" + text },
};
function words() {
  for (const tag of self.navigator.languages || []) {
    const w = WORDS[String(tag).toLowerCase().split("-")[0]];
    if (w) return w;
  }
  return WORDS.en;
}

self.addEventListener("notificationclick", (e) => {
  e.notification.close();
  const conv = (e.notification.data && e.notification.data.conv) || "";
  const path = conv ? "/c/" + encodeURIComponent(conv) : "/";
  e.waitUntil((async () => {
    const wins = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
    for (const w of wins) {
      if (new URL(w.url).origin !== location.origin) continue;
      await w.focus();
      w.postMessage({ t: "open", conv });
      return;
    }
    await self.clients.openWindow(path);
  })());
});
