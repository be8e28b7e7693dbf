// views/signin.js owns the sign-in screen. It promises that this browser
// keeps one device id and one install id, created on its first sign-in and
// kept in localStorage, so every sign-in from it is the same device and
// install; and that the reason the last session ended (STALE_INSTALL,
// UNAUTHENTICATED) is shown in the form, under its button, where a failed
// sign-in says why (a sentence in the page's language, never a code; the
// code is in the element's data-reason). On a server started with --demo,
// the form names the demo accounts and their password (GET /api/server).
// The screen is a <main> of its own (it shows outside the shell), with the
// language switch under the form.

import { newID } from "../id.js";
import { url } from "../urls.js";
import { t, errorText } from "../i18n.js";

/**
 * deviceIDs returns this browser's device id and install id, creating them once.
 * @returns {{device_id: string, install_id: string}}
 */
export function deviceIDs() {
  let device = localStorage.getItem("parley.device_id");
  let install = localStorage.getItem("parley.install_id");
  if (!device) {
    device = "web-" + newID().slice(0, 8);
    localStorage.setItem("parley.device_id", device);
  }
  if (!install) {
    install = newID();
    localStorage.setItem("parley.install_id", install);
  }
  return { device_id: device, install_id: install };
}

/**
 * signinError says why a sign-in failed, in the page's language.
 * @param {{code?: string, retryAfterMs?: number}} err
 * @returns {string}
 */
export function signinError(err) {
  if (err.code === "UNAUTHENTICATED") return t("app.signin.wrong");
  if (err.code === "RATE_LIMITED") return t("app.signin.wait", { n: Math.ceil((err.retryAfterMs || 1000) / 1000) });
  return t("app.signin.failed", { reason: errorText(err) });
}

/**
 * renderSignin builds the sign-in screen: its main landmark holds the
 * form (h1 "Parley") and the language switch.
 * @param {{api: Function, h: Function, reason?: {text: string, code: string}|null, onSignedIn: function(): void, languageSwitch?: function(): HTMLElement}} ctx
 * @returns {HTMLElement}
 */
export function renderSignin(ctx) {
  const { h, api } = ctx;
  const login = h("input", { name: "login", autocomplete: "username", required: true, "data-test": "login", autofocus: true });
  const password = h("input", { name: "password", type: "password", autocomplete: "current-password", required: true, "data-test": "password" });
  const reason = ctx.reason || null;
  const status = h("p", { class: "error", role: "alert", "data-test": "signin-error", "data-reason": reason && reason.code }, reason ? reason.text : "");
  const button = h("button", { type: "submit", class: "primary", "data-test": "signin-submit" }, t("app.signin.submit"));
  const form = h("form", {
    class: "signin", "aria-labelledby": "signin-title", "data-test": "signin",
    on: {
      submit: async (e) => {
        e.preventDefault();
        button.disabled = true;
        status.textContent = "";
        status.removeAttribute("data-reason");
        try {
          await api("POST", url.login(), { login: login.value.trim(), password: password.value, ...deviceIDs() });
          ctx.onSignedIn();
        } catch (err) {
          status.textContent = signinError(err);
          status.setAttribute("data-reason", err.code || "");
          button.disabled = false;
        }
      },
    },
  },
  h("h1", { id: "signin-title" }, "Parley"),
  demoHint(ctx),
  h("label", null, t("app.signin.login"), login),
  h("label", null, t("app.signin.password"), password),
  button,
  status,
  ctx.languageSwitch ? h("label", { class: "signin-lang" }, t("app.language"), ctx.languageSwitch()) : null);
  return h("main", { id: "main", class: "signin-main", tabindex: "-1" }, form);
}

/**
 * demoHint returns a paragraph that names the demo accounts once the
 * server says it has them; it stays empty (and hidden) otherwise.
 * @param {{api: Function, h: Function}} ctx
 * @returns {HTMLElement}
 */
function demoHint(ctx) {
  const p = ctx.h("p", { class: "hint", hidden: true, "data-test": "demo-hint" });
  ctx.api("GET", url.server()).then((s) => {
    const demo = s && s.demo;
    if (!demo || !Array.isArray(demo.users) || demo.users.length === 0) return;
    p.textContent = t("app.signin.demo", { users: listOf(demo.users), password: demo.password });
    p.hidden = false;
  }, () => {}); // an older server or an outage: no hint, the form works as ever
  return p;
}

/**
 * listOf joins names as "ana, ben or cy" ("ana、ben 或 cy").
 * @param {string[]} names
 * @returns {string}
 */
function listOf(names) {
  if (names.length === 1) return names[0];
  return t("app.orList", { list: names.slice(0, -1).join(t("app.listSep")), last: names[names.length - 1] });
}
