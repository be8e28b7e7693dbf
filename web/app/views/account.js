// views/account.js is the account screen: the user's display name, what
// their files take against the quota (when the server stores files), a
// password change (which signs every other device out), and the devices
// signed in to the account, each but this one with "Sign out". It loads
// on demand (manage.js), like the other management screens.

import { h, clear } from "../dom.js";
import { url } from "../urls.js";
import { setName } from "../names.js";
import { button, busy, field, input, screen, sizeText, statusLine, usageMeter, usageText, when } from "./forms.js";

/**
 * renderAccount builds the account screen.
 * @param {{api: Function, me: object, toast: Function}} ctx
 * @returns {HTMLElement}
 */
export function renderAccount(ctx) {
  const devices = devicesSection(ctx);
  const el = screen("Account", "account", nameSection(ctx), filesSection(ctx), passwordSection(ctx), devices);
  el.dispose = devices.dispose;
  return el;
}

function nameSection(ctx) {
  const me = ctx.me.user;
  const status = statusLine();
  const box = input({ type: "text", maxlength: 64, autocomplete: "nickname", "data-test": "display-name" }, me.display_name || "");
  const save = h("button", { type: "submit", "data-test": "save-name" }, "Save");
  const form = h("form", {
    class: "m-form",
    on: {
      submit: async (e) => {
        e.preventDefault();
        try {
          const r = await busy(save, ctx.api("PATCH", url.me(), { display_name: box.value }));
          me.display_name = r.user.display_name || "";
          me.name = r.user.name;
          box.value = me.display_name;
          setName(me.id, me.display_name);
          status.show(me.display_name ? "Saved: others see you as " + me.display_name + "." : "Cleared: others see your id, " + me.id + ".");
        } catch (err) {
          status.error(err);
        }
      },
    },
  },
  field("Display name", box, "Shown in place of your id (" + me.id + "); up to 64 characters. Leave empty to show your id."),
  save, status.el);
  return h("section", { "aria-labelledby": "acc-name" }, h("h2", { id: "acc-name", class: "m-h2" }, "Name"), form);
}

// filesSection shows the user's files against the quota, read afresh
// from GET /api/me (the copy the app started with is out of date after an
// upload). It stays hidden when the server stores no files.
function filesSection(ctx) {
  const status = statusLine();
  const body = h("div", { "data-test": "my-files" });
  const el = h("section", { "aria-labelledby": "acc-files", hidden: true },
    h("h2", { id: "acc-files", class: "m-h2" }, "Files"), body, status.el);
  (async () => {
    try {
      const r = await ctx.api("GET", url.me());
      const f = r.files;
      if (!f) return;
      clear(body);
      body.setAttribute("data-bytes", String(f.bytes));
      body.append(
        h("p", { class: "m-usage" }, usageMeter(f, "Your files"), " ", h("span", { "data-test": "my-files-used" }, usageText(f) + " used")),
        h("p", { class: "m-hint" }, "Uploads in progress count at their full size. One file may have up to " + sizeText(f.max_file_size) + "."));
      body.setAttribute("data-loaded", "true");
      el.hidden = false;
    } catch (err) {
      el.hidden = false;
      status.error(err);
    }
  })();
  return el;
}

function passwordSection(ctx) {
  const status = statusLine();
  const current = input({ type: "password", autocomplete: "current-password", "data-test": "current-password" });
  const next = input({ type: "password", autocomplete: "new-password", minlength: 8, "data-test": "new-password" });
  const again = input({ type: "password", autocomplete: "new-password", "data-test": "new-password-again" });
  const save = h("button", { type: "submit", "data-test": "change-password" }, "Change password");
  const form = h("form", {
    class: "m-form",
    on: {
      submit: async (e) => {
        e.preventDefault();
        if (next.value !== again.value) {
          status.error({ code: "INVALID_ARGUMENT", message: "The new passwords do not match." });
          return;
        }
        try {
          await busy(save, ctx.api("POST", url.password(), { current: current.value, new: next.value }));
          current.value = next.value = again.value = "";
          status.show("Password changed. Your other devices were signed out.");
          document.dispatchEvent(new CustomEvent("parley:sessions"));
        } catch (err) {
          status.error(err);
        }
      },
    },
  },
  field("Current password", current),
  field("New password", next, "At least 8 characters."),
  field("New password again", again),
  save, status.el);
  return h("section", { "aria-labelledby": "acc-pw" }, h("h2", { id: "acc-pw", class: "m-h2" }, "Password"), form);
}

function devicesSection(ctx) {
  const status = statusLine();
  const list = h("ul", { class: "m-list", "data-test": "sessions", "aria-label": "Signed-in devices" });
  const load = async () => {
    try {
      const r = await ctx.api("GET", url.sessions());
      clear(list);
      for (const s of r.sessions || []) list.append(sessionRow(ctx, s, status, load));
      list.setAttribute("data-loaded", "true");
    } catch (err) {
      status.error(err);
    }
  };
  document.addEventListener("parley:sessions", load);
  const el = h("section", { "aria-labelledby": "acc-dev" },
    h("h2", { id: "acc-dev", class: "m-h2" }, "Devices"),
    h("p", { class: "m-hint" }, "Devices signed in to your account. Signing one out ends its session at once."),
    list, status.el);
  el.dispose = () => document.removeEventListener("parley:sessions", load);
  load();
  return el;
}

function sessionRow(ctx, s, status, reload) {
  const row = h("li", { class: "m-item", "data-test": "session-" + s.device_id, "data-current": s.current ? "true" : "false" },
    h("span", { class: "m-name" }, s.device_id, s.current ? " (this device)" : ""),
    " ",
    h("small", { class: "muted" }, "signed in " + when(s.created_at) + ", last seen " + when(s.last_seen)));
  if (!s.current) {
    row.append(" ", button("Sign out", async (e) => {
      try {
        await busy(e.currentTarget, ctx.api("DELETE", url.session(s.device_id)));
        status.show(s.device_id + " was signed out.");
        reload();
      } catch (err) {
        status.error(err);
      }
    }, { "aria-label": "Sign out " + s.device_id, "data-test": "signout-" + s.device_id }));
  }
  return row;
}
