// boot.js: the shell's first script, a classic one that runs before the
// app's modules and styles load. It recovers a page whose release went
// stale (docs/protocol.md#the-browser-app).
//
// The shell is never cached, but a page that was open across a deploy, or
// a shell kept by a proxy, names hashed assets the server no longer has
// (404). When a core asset (a script or stylesheet under /assets/) fails
// to load — a module whose imports fail included: the module graph's
// error is reported on its <script> element — the page reloads itself
// once, with a cache-busting query parameter. If it already did so in the
// last 30 seconds, it shows a "Reload" button instead of looping.
(function () {
  "use strict";

  var KEY = "parley.boot.reloadedAt"; // sessionStorage: when this tab last reloaded itself
  var PARAM = "reload"; // the cache-busting parameter: the reload's time, base 36
  var WINDOW_MS = 30000;

  // When the page last reloaded itself: from sessionStorage, or from the
  // parameter when storage is unavailable (so a page never loops).
  var reloadedAt = 0;
  try {
    reloadedAt = Number(sessionStorage.getItem(KEY)) || 0;
  } catch (e) {
    // storage blocked: the parameter below still tells
  }
  try {
    var here = new URL(location.href);
    if (here.searchParams.has(PARAM)) {
      reloadedAt = Math.max(reloadedAt, parseInt(here.searchParams.get(PARAM), 36) || 0);
      // The parameter did its job (the shell came fresh); the app's
      // router sees the address without it.
      here.searchParams.delete(PARAM);
      history.replaceState(history.state, "", here.pathname + here.search + here.hash);
    }
  } catch (e) {
    // an address URL cannot parse: leave it
  }

  // isCoreAsset: a script or stylesheet of this origin under /assets/.
  function isCoreAsset(el) {
    var ref = "";
    if (el.tagName === "SCRIPT") {
      ref = el.src;
    } else if (el.tagName === "LINK" && /(^|\s)(stylesheet|modulepreload)(\s|$)/i.test(el.rel)) {
      ref = el.href;
    }
    if (!ref) {
      return false;
    }
    try {
      var u = new URL(ref, location.href);
      return u.origin === location.origin && u.pathname.indexOf("/assets/") === 0;
    } catch (e) {
      return false;
    }
  }

  function reload() {
    var now = Date.now();
    try {
      sessionStorage.setItem(KEY, String(now));
    } catch (e) {
      // the parameter carries the time instead
    }
    var u = new URL(location.href);
    u.searchParams.set(PARAM, now.toString(36));
    location.replace(u.href);
  }

  // The two strings this script shows, in the page's language: the one
  // the user picked (i18n.js keeps it in localStorage), else the first of
  // the browser's languages that is English or Chinese. This script runs
  // before the catalogues can load, so it carries its own.
  var TEXT = {
    en: { failed: "Parley could not load all of its files; a new version may have been installed.", reload: "Reload" },
    zh: { failed: "Parley 未能加载全部文件，可能已安装了新版本。", reload: "重新加载" }
  };
  function text() {
    var lang = "";
    try {
      lang = localStorage.getItem("parley.lang") || "";
    } catch (e) {
      // storage blocked: the browser's languages decide
    }
    var tags = navigator.languages && navigator.languages.length ? navigator.languages : [navigator.language || "en"];
    for (var i = 0; !TEXT[lang] && i < tags.length; i++) {
      var base = String(tags[i]).toLowerCase().split("-")[0];
      if (TEXT[base]) {
        lang = base;
      }
    }
    return TEXT[lang] || TEXT.en;
  }

  // showReload puts a "Reload" button on the page (DOM APIs only: no
  // inline handler, no HTML strings; the CSP allows neither).
  function showReload() {
    if (document.querySelector('[data-test="boot-reload"]')) {
      return;
    }
    var box = document.createElement("div");
    box.className = "boot-reload";
    box.setAttribute("role", "alert");
    box.dataset.test = "boot-reload";
    var words = text();
    var p = document.createElement("p");
    p.textContent = words.failed;
    var button = document.createElement("button");
    button.type = "button";
    button.textContent = words.reload;
    button.dataset.test = "boot-reload-button";
    button.addEventListener("click", reload);
    box.append(p, button);
    document.body.prepend(box);
    button.focus();
  }

  var handled = false;
  function assetFailed() {
    if (handled) {
      return; // one decision per page: a second failure changes nothing
    }
    handled = true;
    if (Date.now() - reloadedAt < WINDOW_MS) {
      if (document.body) {
        showReload();
      } else {
        document.addEventListener("DOMContentLoaded", showReload);
      }
      return;
    }
    reload();
  }

  // Capture phase: a failed load's error event does not bubble, but it is
  // captured on its way down from window.
  window.addEventListener(
    "error",
    function (ev) {
      var el = ev.target;
      if (el && el !== window && el.nodeType === 1 && isCoreAsset(el)) {
        assetFailed();
      }
    },
    true
  );
})();
