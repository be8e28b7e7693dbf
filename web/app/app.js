// app.js is the entry module: it boots the session (GET /api/me), lays out
// the page (top bar with the connection indicator and the menu, sidebar with
// the conversation list, main pane) and routes History API paths to views:
// its own (/signin, /, /c/{id}) and those manage.js exports. It owns the one
// Client (store.js) of the signed-in session and hands it to every view in
// ctx, so no view opens its own connection. Everything the page shows
// about the session outside the views is done here, from the client's
// events: the connection indicator, the unread count in the page title,
// the "Allow notifications" button (the notifications themselves: views/notify.js,
// loaded with live.js), the way back to sign-in when the
// session ends, and the way into the message search (views/search.js,
// loaded on first use): the Search button, Ctrl+K (⌘K), or "/" when the
// keyboard is not in a text field.

import { api, ApiError } from "./api.js";
import { retryDelay } from "./backoff.js";
import { h, clear } from "./dom.js";
import { Client } from "./store.js";
import { url } from "./urls.js";
import { routes as manageRoutes, menu as manageMenu } from "./manage.js";
import { renderSignin } from "./views/signin.js";
import { renderList } from "./views/list.js";
import { renderTimeline } from "./views/timeline.js";
import { nameEl, setName } from "./names.js";
import { load as loadLanguage } from "./i18n.js";

/** The chat routes; manage.js adds its own after them. */
const chatRoutes = [
  { path: "/", view: null, pane: "list" },
  { path: "/c/:id", view: renderTimeline, pane: "main" },
];

const root = document.getElementById("app");
let me = null; // /api/me of the session
let client = null;
let shell = null; // {el, main, sidebar, nav, conn}
let mainView = null; // {el, dispose?}
let signinReason = "";
let stopLive = null; // live.js's stop, once loaded

/**
 * match finds the route for a path.
 * @param {string} path
 * @returns {{route: object, params: Object<string,string>}|null}
 */
export function match(path) {
  const all = [...chatRoutes, ...manageRoutes];
  const segs = path.split("/").filter(Boolean);
  for (const route of all) {
    const rsegs = route.path.split("/").filter(Boolean);
    if (rsegs.length !== segs.length) continue;
    const params = {};
    let ok = true;
    for (let i = 0; i < rsegs.length; i++) {
      if (rsegs[i].startsWith(":")) {
        try {
          params[rsegs[i].slice(1)] = decodeURIComponent(segs[i]);
        } catch {
          ok = false;
        }
      } else if (rsegs[i] !== segs[i]) ok = false;
      if (!ok) break;
    }
    if (ok) return { route, params };
  }
  return null;
}

/**
 * navigate moves to a path of the app without reloading the page.
 * @param {string} path
 * @param {{replace?: boolean}} [opts]
 */
export function navigate(path, opts) {
  if (opts && opts.replace) history.replaceState(null, "", path);
  else if (location.pathname + location.search !== path) history.pushState(null, "", path);
  render();
}

let toastTimer = 0;
/**
 * toast shows a short message at the bottom of the page (role=status).
 * @param {string} text
 */
export function toast(text) {
  let el = document.querySelector(".toast");
  if (!el) {
    el = h("div", { class: "toast", role: "status", "aria-live": "polite", "data-test": "toast" });
    document.body.appendChild(el);
  }
  el.textContent = text;
  el.classList.remove("hidden");
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => el.classList.add("hidden"), 5000);
}

function ctx() {
  return { api, h, me, navigate, toast, client };
}

const KEPT = "parley.me"; // localStorage: the last /api/me, to start offline

/** boot asks the server who is signed in, then starts the client or shows sign-in; offline, the kept session. */
async function boot() {
  for (;;) {
    try {
      me = await api("GET", url.me());
      keep(me);
      break;
    } catch (e) {
      if (e instanceof ApiError && (e.code === "UNAUTHENTICATED" || e.code === "STALE_INSTALL")) {
        if (e.code === "STALE_INSTALL") signinReason = "This browser's sign-in was replaced (STALE_INSTALL). Sign in again.";
        me = null;
        keep(null);
        break;
      }
      try {
        me = JSON.parse(localStorage.getItem(KEPT));
      } catch {
        me = null;
      }
      if (me && e.code === "UNAVAILABLE") break;
      clear(root).appendChild(h("p", { class: "empty-pane", role: "status" }, "Cannot reach the server; retrying…"));
      await new Promise((r) => setTimeout(r, retryDelay(e, 1000, 1000)));
    }
  }
  if (me) {
    setName(me.user.id, me.user.display_name || "");
    startSession();
  }
  render();
}

function startSession() {
  client = new Client(me);
  client.on("auth", (code, detail) => {
    signOutLocal(code === "STALE_INSTALL"
      ? "This browser's sign-in was replaced by a newer one (STALE_INSTALL). Sign in again."
      : "Your session ended (" + code + (detail ? ": " + detail : "") + "). Sign in again.");
  });
  client.on("conn", updateConn);
  client.on("convs", updateTitle);
  client.start();
  const c = client;
  import("./live.js").then((m) => {
    if (client === c) stopLive = m.start(ctx());
  }, (e) => console.warn("live signals:", e));
}

/** keep remembers the session's /api/me (null: forgets it). */
function keep(m) {
  try {
    if (m) localStorage.setItem(KEPT, JSON.stringify(m));
    else localStorage.removeItem(KEPT);
  } catch {
    // storage blocked: no offline start
  }
}

function signOutLocal(reason) {
  keep(null);
  if (stopLive) stopLive();
  stopLive = null;
  if (client) client.stop();
  client = null;
  me = null;
  shell = null;
  signinReason = reason || "";
  navigate("/signin", { replace: true });
}

async function signOut() {
  try {
    await api("POST", url.logout());
  } catch {
    // The cookie may already be gone; signing out locally is what the user asked.
  }
  signOutLocal("");
}

function updateTitle() {
  const n = client ? client.totalUnread() : 0;
  document.title = (n > 0 ? "(" + n + ") " : "") + "Parley";
}

function updateConn() {
  if (!shell || !client) return;
  const st = client.connState();
  const label = { online: "Connected", connecting: "Connecting…", offline: "Offline" }[st] || st;
  shell.conn.setAttribute("data-state", st);
  shell.conn.setAttribute("aria-label", "Connection: " + label);
  shell.conn.querySelector(".conn-label").textContent = label;
}

/**
 * allowButton returns the "Allow notifications" button, or null when the
 * browser has no notifications or the user already answered.
 * @returns {HTMLElement|null}
 */
function allowButton() {
  if (typeof Notification === "undefined" || Notification.permission !== "default") return null;
  const b = h("button", {
    type: "button", "data-test": "allow-notify",
    on: {
      click: async () => {
        await Notification.requestPermission();
        b.remove();
      },
    },
  }, "Allow notifications");
  return b;
}

function buildShell() {
  const nav = h("nav", { "aria-label": "Menu" });
  const conn = h("span", { class: "conn", role: "status", "data-test": "conn", "data-state": "connecting" },
    h("span", { class: "conn-label" }, "Connecting…"));
  const sidebar = h("aside", { class: "sidebar", "aria-label": "Conversations" });
  const main = h("main", { class: "main", id: "main" });
  const el = h("div", { class: "shell route-list" },
    h("header", { class: "topbar" },
      h("a", { class: "brand", href: "/", "data-nav": "" }, "Parley"),
      conn,
      nav,
      h("button", {
        type: "button", "data-test": "search-open", title: "Search messages (Ctrl+K, or /)", "aria-keyshortcuts": "Control+K Meta+K /",
        on: { click: openSearch },
      }, "Search"),
      allowButton(),
      h("a", { class: "muted", href: "/account", "data-nav": "", "data-test": "me" }, nameEl(h, me.user.id)),
      h("button", { type: "button", "data-test": "signout", on: { click: signOut } }, "Sign out")),
    sidebar, main);
  for (const m of manageMenu) {
    if (m.admin && me.user.role !== "admin") continue;
    nav.appendChild(h("a", { href: m.path, "data-nav": "" }, m.label));
  }
  shell = { el, main, sidebar, nav, conn, list: null };
  shell.list = renderList(ctx());
  sidebar.appendChild(shell.list);
  clear(root).appendChild(el);
  updateConn();
  updateTitle();
}

/** render shows the view of the current path. */
function render() {
  const path = location.pathname;
  if (mainView && mainView.dispose) mainView.dispose();
  mainView = null;
  if (!me) {
    // The address stays: after signing in, the page shows what it names.
    shell = null;
    const reason = signinReason;
    clear(root).appendChild(renderSignin({ api, h, reason, onSignedIn: signedIn }));
    document.title = "Sign in · Parley";
    return;
  }
  if (path === "/signin") {
    history.replaceState(null, "", "/");
    return render();
  }
  if (!shell) buildShell();
  for (const a of shell.nav.querySelectorAll("a")) {
    if (a.getAttribute("href") === path) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  const m = match(path);
  clear(shell.main);
  shell.el.classList.toggle("route-list", !m || !m.route.view);
  shell.el.classList.toggle("route-main", !!(m && m.route.view));
  if (shell.list.select) shell.list.select(m && m.params.id && m.route.path === "/c/:id" ? m.params.id : null);
  if (!m) {
    shell.main.appendChild(h("div", { class: "empty-pane", "data-test": "not-found" }, "Nothing here. ", h("a", { href: "/", "data-nav": "" }, "Back to the conversations")));
    return;
  }
  if (!m.route.view) {
    shell.main.appendChild(h("div", { class: "empty-pane" }, "Choose a conversation."));
    return;
  }
  const el = m.route.view(ctx(), m.params);
  mainView = el;
  shell.main.appendChild(el);
}

/** openSearch loads the search dialog (on first use) and shows it. */
function openSearch() {
  if (!client || !shell) return;
  import("./views/search.js").then((m) => m.openSearch(ctx()), () => toast("The search could not load; check the connection and try again."));
}

/** typing reports whether a key goes to a text field (where "/" is a character). */
function typing(el) {
  return el instanceof Element && !!el.closest("input, textarea, select, [contenteditable]:not([contenteditable=false])");
}

document.addEventListener("keydown", (e) => {
  if (e.defaultPrevented || e.altKey || e.isComposing) return;
  const ctrlK = (e.ctrlKey || e.metaKey) && !e.shiftKey && (e.key === "k" || e.key === "K");
  const slash = e.key === "/" && !e.ctrlKey && !e.metaKey && !typing(e.target);
  if (!ctrlK && !slash) return;
  if (!client || !shell) return;
  e.preventDefault();
  openSearch();
});

function signedIn() {
  signinReason = "";
  boot();
}

// Same-origin links marked data-nav (and every link of the app's own paths)
// navigate without a reload.
document.addEventListener("click", (e) => {
  if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  const a = e.target.closest && e.target.closest("a[href]");
  if (!a || a.target || a.hasAttribute("download")) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin) return;
  if (!a.hasAttribute("data-nav") && !match(url.pathname)) return;
  e.preventDefault();
  navigate(url.pathname + url.search);
});
window.addEventListener("popstate", render);

// The service worker: offline loads, pushes.
if (navigator.serviceWorker) navigator.serviceWorker.register("/sw.js").catch((e) => console.warn("service worker:", e));

// The catalogue of the page's language first: every view's strings come
// from it. Without it (a catalogue that cannot load) strings show as keys.
loadLanguage().catch((e) => console.warn("language:", e)).finally(boot);
