// views/signin.js owns the sign-in screen. It promises that this browser
// keeps one device id and one install id, created on its first sign-in and
// kept in localStorage, so every sign-in from it is the same device and
// install; and that the reason the last session ended (STALE_INSTALL,
// UNAUTHENTICATED) is shown in the form, under its button, where a failed
// sign-in says why. On a server started with --demo, the form names the
// demo accounts and their password (GET /api/server).

import { newID } from "../id.js";
import { url } from "../urls.js";

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
 * renderSignin builds the sign-in form.
 * @param {{api: Function, h: Function, reason?: string, onSignedIn: function(): void}} ctx
 * @returns {HTMLElement}
 */
export function renderSignin(ctx) {
  const { h, api } = ctx;
  const login = h("input", { name: "login", autocomplete: "username", required: true, "data-test": "login", autofocus: true });
  const password = h("input", { name: "password", type: "password", autocomplete: "current-password", required: true, "data-test": "password" });
  const status = h("p", { class: "error", role: "alert", "data-test": "signin-error" }, ctx.reason || "");
  const button = h("button", { type: "submit", class: "primary", "data-test": "signin-submit" }, "Sign in");
  const form = h("form", {
    class: "signin", "aria-labelledby": "signin-title", "data-test": "signin",
    on: {
      submit: async (e) => {
        e.preventDefault();
        button.disabled = true;
        status.textContent = "";
        try {
          await api("POST", url.login(), { login: login.value.trim(), password: password.value, ...deviceIDs() });
          ctx.onSignedIn();
        } catch (err) {
          status.textContent = err.code === "UNAUTHENTICATED"
            ? "Wrong login or password."
            : err.code === "RATE_LIMITED"
              ? "Too many attempts; try again in " + Math.ceil((err.retryAfterMs || 1000) / 1000) + " s."
              : "Sign-in failed: " + (err.detail || err.code);
          button.disabled = false;
        }
      },
    },
  },
  h("h1", { id: "signin-title" }, "Parley"),
  demoHint(ctx),
  h("label", null, "Login", login),
  h("label", null, "Password", password),
  button,
  status);
  return form;
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
    const names = demo.users.slice(0, -1).join(", ") + (demo.users.length > 1 ? " or " : "") + demo.users[demo.users.length - 1];
    p.textContent = "Demo server: sign in as " + names + " with the password " + demo.password + ".";
    p.hidden = false;
  }, () => {}); // an older server or an outage: no hint, the form works as ever
  return p;
}
