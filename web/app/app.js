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
// keyboard is not in a text field. It also keeps the accessibility
// skeleton of every screen (a skip link first, one <main id="main">, one
// h1) and the language switch (i18n.js choose); every string it shows is
// t() of the catalogues, and a session that ended says why in a sentence.

import { api, ApiError } from "./api.js";
import { retryDelay } from "./backoff.js";
import { h, clear } from "./dom.js";
import { Client } from "./store.js";
import { url } from "./urls.js";
import { routes as manageRoutes, menu as manageMenu } from "./manage.js";
import { renderSignin } from "./views/signin.js";
import { renderList } from "./views/list.js";
import { renderTimeline } from "./views/timeline.js";
import { nameEl, avatarEl, setName, onNames } from "./names.js";
import { load as loadLanguage, t, errorText, number, language, choose, LANGUAGES } from "./i18n.js";

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
let signinReason = null; // why the last session ended: {text, code}, or null
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
        if (e.code === "STALE_INSTALL") signinReason = { text: errorText(e), code: e.code };
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
      clear(root).appendChild(h("main", { id: "main" }, h("h1", { class: "visually-hidden" }, "Parley"), h("p", { class: "empty-pane", role: "status" }, t("app.unreachable"))));
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
  client.on("auth", (code) => {
    // A sentence, never the code: the code stays in data-reason for tests.
    signOutLocal({ text: code === "UNAUTHENTICATED" ? t("app.sessionEnded") : errorText(code), code });
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
  signinReason = reason || null;
  navigate("/signin", { replace: true });
}

async function signOut() {
  try {
    await api("POST", url.logout());
  } catch {
    // The cookie may already be gone; signing out locally is what the user asked.
  }
  signOutLocal(null);
}

function updateTitle() {
  const n = client ? client.totalUnread() : 0;
  document.title = (n > 0 ? "(" + number(n) + ") " : "") + "Parley";
  if (shell) screenTitle();
}

/** connLabel names a connection state in the page's language. */
function connLabel(st) {
  if (st === "online") return t("app.conn.online");
  if (st === "offline") return t("app.conn.offline");
  return t("app.conn.connecting");
}

function updateConn() {
  if (!shell || !client) return;
  const st = client.connState();
  const label = connLabel(st);
  shell.conn.setAttribute("data-state", st);
  shell.conn.setAttribute("aria-label", t("app.conn.label", { state: label }));
  shell.conn.querySelector(".conn-label").textContent = label;
}

const HINT_DISMISSED = "parley.notifyHint"; // localStorage: the notification hint the user dismissed

/**
 * notifyProblem says why this page cannot show notifications ("" when it
 * can, or may once the user is asked).
 * @param {string} [perm] the permission just answered
 * @returns {string}
 */
function notifyProblem(perm) {
  if (typeof Notification === "undefined") return t("app.notify.unsupported");
  if ((perm || Notification.permission) === "denied") return t("app.notify.blocked");
  return "";
}

/**
 * showNotifyStatus puts the sentence of notifyProblem in the sidebar
 * (data-test=notify-status) until the user dismisses it; a dismissed
 * sentence shows again only when asked anew (fresh).
 * @param {boolean} fresh the user just asked (a dismissal is forgotten)
 * @param {string} [perm]
 */
function showNotifyStatus(fresh, perm) {
  if (!shell) return;
  const text = notifyProblem(perm);
  const old = shell.sidebar.querySelector("[data-test=notify-status]");
  if (old) old.remove();
  if (!text) return;
  const kind = typeof Notification === "undefined" ? "unsupported" : "denied";
  try {
    if (fresh) localStorage.removeItem(HINT_DISMISSED);
    else if (localStorage.getItem(HINT_DISMISSED) === kind) return;
  } catch {
    // storage blocked: the hint shows at every start
  }
  const p = h("p", { class: "notify-status", role: "status", "data-test": "notify-status" },
    h("span", null, text),
    h("button", {
      type: "button", class: "link", "data-test": "notify-status-dismiss",
      on: {
        click: () => {
          try {
            localStorage.setItem(HINT_DISMISSED, kind);
          } catch {
            // the hint goes for this page only
          }
          p.remove();
        },
      },
    }, t("app.dismiss")));
  shell.sidebar.prepend(p);
}

/**
 * allowButton returns the "Allow notifications" button, or null when the
 * browser has no notifications or the user already answered. Its answer
 * is said: on, or blocked (a toast and the sidebar's sentence).
 * @returns {HTMLElement|null}
 */
function allowButton() {
  if (typeof Notification === "undefined" || Notification.permission !== "default") return null;
  const b = h("button", {
    type: "button", "data-test": "allow-notify",
    on: {
      click: async () => {
        let perm = "";
        try {
          // Older Safari answers through a callback only.
          perm = await Notification.requestPermission();
        } catch {
          // the permission below says what happened
        }
        perm = perm || Notification.permission;
        if (perm === "default") {
          toast(t("app.notify.notAnswered"));
          return;
        }
        b.remove();
        if (perm === "granted") {
          toast(t("app.notify.on"));
          return;
        }
        toast(notifyProblem(perm));
        showNotifyStatus(true, perm);
      },
    },
  }, t("app.notify.allow"));
  return b;
}

/**
 * languageSwitch returns the select of the page's language: every
 * language of LANGUAGES by its own name; a choice reloads the page in it.
 * @returns {HTMLElement}
 */
function languageSwitch() {
  const sel = h("select", {
    class: "lang-switch", "data-test": "lang", "aria-label": t("app.language"), title: t("app.language"),
    on: { change: () => choose(sel.value) },
  }, Object.entries(LANGUAGES).map(([code, l]) => h("option", { value: code, lang: l.locale, selected: code === language() }, l.name)));
  return sel;
}

/**
 * skipLink returns the "Skip to the content" link, the first thing the
 * keyboard reaches: it moves the focus to the screen's <main id="main">.
 * @returns {HTMLElement}
 */
function skipLink() {
  return h("a", {
    class: "skip-link", href: "#main", "data-test": "skip-link",
    on: {
      click: (e) => {
        const main = document.getElementById("main");
        if (!main) return;
        e.preventDefault();
        main.setAttribute("tabindex", "-1");
        main.focus();
        main.scrollIntoView({ block: "start" });
      },
    },
  }, t("app.skip"));
}

function buildShell() {
  const nav = h("nav", { "aria-label": t("app.menu") });
  const conn = h("span", { class: "conn", role: "status", "data-test": "conn", "data-state": "connecting" },
    h("span", { class: "conn-label" }, t("app.conn.connecting")));
  // One main landmark holds the list and the pane, so the list screen of
  // a phone (the list alone) has its main too.
  const sidebar = h("section", { class: "sidebar", "aria-label": t("app.conversations") });
  const main = h("div", { class: "main" });
  const body = h("main", { class: "body", id: "main", tabindex: "-1" }, sidebar, main);
  // The menu: in the top bar's row on a wide screen; behind the "Menu"
  // button on a phone (app.css), so the bar stays one row.
  const panel = h("div", { class: "topmenu", id: "topmenu", "data-test": "topmenu" },
    nav,
    allowButton(),
    languageSwitch(),
    h("span", { class: "me" },
      avatarEl(h, me.user.id),
      h("a", { class: "muted", href: "/account", "data-nav": "", "data-test": "me" }, nameEl(h, me.user.id))),
    h("button", { type: "button", "data-test": "signout", on: { click: signOut } }, t("app.signOut")));
  const toggle = h("button", {
    type: "button", class: "menu-toggle", "aria-expanded": "false", "aria-controls": "topmenu", "data-test": "menu-toggle",
    on: { click: () => openMenu(toggle.getAttribute("aria-expanded") !== "true") },
  }, t("app.menu"));
  panel.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && toggle.getAttribute("aria-expanded") === "true") {
      openMenu(false);
      toggle.focus();
    }
  });
  const el = h("div", { class: "shell route-list" },
    skipLink(),
    h("header", { class: "topbar" },
      h("a", { class: "brand", href: "/", "data-nav": "" }, "Parley"),
      conn,
      h("button", {
        type: "button", "data-test": "search-open", title: t("app.search.hint"), "aria-keyshortcuts": "Control+K Meta+K /",
        on: { click: openSearch },
      }, t("app.search")),
      toggle,
      panel),
    body);
  for (const m of manageMenu) {
    if (m.admin && me.user.role !== "admin") continue;
    nav.appendChild(h("a", { href: m.path, "data-nav": "" }, m.label()));
  }
  // The screen's h1 when its view has none of its own (the list screen's
  // is the list's heading; a conversation's is its title).
  const h1 = h("h1", { class: "visually-hidden", "data-test": "screen-title" });
  shell = { el, main, sidebar, nav, conn, h1, toggle, panel, onList: true, list: null };
  shell.list = renderList(ctx());
  sidebar.appendChild(shell.list);
  clear(root).appendChild(el);
  new MutationObserver(placeH1).observe(main, { childList: true, subtree: true });
  showNotifyStatus(false);
  updateConn();
  updateTitle();
}

/**
 * openMenu shows or hides the top bar's menu (a phone's; on a wide screen
 * it always shows).
 * @param {boolean} open
 */
function openMenu(open) {
  if (!shell) return;
  shell.toggle.setAttribute("aria-expanded", String(open));
  shell.panel.classList.toggle("open", open);
}

/**
 * screenTitle keeps exactly one h1 on the screen: on the list screen the
 * list's heading; elsewhere the view's own h1, else the shell's (hidden)
 * one naming the screen: the conversation's title, or "Page not found".
 */
function screenTitle() {
  if (!shell) return;
  const m = match(location.pathname);
  const onList = !!m && m.route.path === "/";
  if (shell.list.primary) shell.list.primary(onList);
  let text = "Parley";
  if (!m) text = t("app.notFound.title");
  else if (m.route.path === "/c/:id" && client) {
    const c = client.conversations().find((x) => x.conv === m.params.id);
    text = c ? client.title(c) : t("app.conversation");
  }
  if (shell.h1.textContent !== text) shell.h1.textContent = text;
  shell.onList = onList;
  placeH1();
}

/** placeH1 puts the shell's h1 first in main unless the screen has its own. */
function placeH1() {
  if (!shell) return;
  const own = [...shell.main.querySelectorAll("h1")].some((x) => x !== shell.h1);
  if (shell.onList || own) {
    if (shell.h1.isConnected) shell.h1.remove();
  } else if (shell.main.firstChild !== shell.h1) {
    shell.main.prepend(shell.h1);
  }
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
    clear(root).append(skipLink(), renderSignin({ api, h, reason, onSignedIn: signedIn, languageSwitch }));
    document.title = t("app.signin.pageTitle");
    return;
  }
  if (path === "/signin") {
    history.replaceState(null, "", "/");
    return render();
  }
  if (!shell) buildShell();
  openMenu(false);
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
    shell.main.appendChild(h("div", { class: "empty-pane", "data-test": "not-found" }, t("app.notFound"), " ", h("a", { href: "/", "data-nav": "" }, t("app.backToList"))));
  } else if (!m.route.view) {
    shell.main.appendChild(h("div", { class: "empty-pane" }, t("app.choose")));
  } else {
    const el = m.route.view(ctx(), m.params);
    mainView = el;
    shell.main.appendChild(el);
  }
  screenTitle();
}

/** openSearch loads the search dialog (on first use) and shows it. */
function openSearch() {
  if (!client || !shell) return;
  import("./views/search.js").then((m) => m.openSearch(ctx()), () => toast(t("app.search.failed")));
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
  signinReason = null;
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
  if (url.hash && url.pathname === location.pathname && url.search === location.search) return; // a link within the page
  if (!a.hasAttribute("data-nav") && !match(url.pathname)) return;
  e.preventDefault();
  navigate(url.pathname + url.search);
});
window.addEventListener("popstate", render);
// A click outside the phone's open menu closes it.
document.addEventListener("click", (e) => {
  if (shell && shell.panel.classList.contains("open") && !shell.panel.contains(e.target) && !shell.toggle.contains(e.target)) openMenu(false);
});
// A direct conversation's screen title is the other user's name.
onNames(screenTitle);

// The service worker: offline loads, pushes.
if (navigator.serviceWorker) navigator.serviceWorker.register("/sw.js").catch((e) => console.warn("service worker:", e));

// The catalogue of the page's language first: every view's strings come
// from it. Without it (a catalogue that cannot load) strings show as keys.
loadLanguage().catch((e) => console.warn("language:", e)).finally(boot);
