// views/account.js is the account screen: the user's display name, what
// their files take against the quota (when the server stores files), a
// password change (which signs every other device out), and the devices
// signed in to the account, each but this one with "Sign out". It loads
// on demand (manage.js), like the other management screens.

import { h, clear } from "../dom.js";
import { url } from "../urls.js";
import { setName } from "../names.js";
import { humanSize } from "../bytes.js";
import { t, when } from "../i18n.js";
import { confirmDialog } from "./confirm.js";
import { button, busy, field, input, screen, statusLine, usageMeter, usageText } from "./forms.js";

/**
 * renderAccount builds the account screen.
 * @param {{api: Function, me: object, toast: Function}} ctx
 * @returns {HTMLElement}
 */
export function renderAccount(ctx) {
  const devices = devicesSection(ctx);
  const el = screen(t("manage.account.title"), "account", nameSection(ctx), filesSection(ctx), passwordSection(ctx), devices);
  el.dispose = devices.dispose;
  return el;
}

function nameSection(ctx) {
  const me = ctx.me.user;
  const status = statusLine();
  const box = input({ type: "text", maxlength: 64, autocomplete: "nickname", "data-test": "display-name" }, me.display_name || "");
  const save = h("button", { type: "submit", "data-test": "save-name" }, t("manage.save"));
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
          status.show(me.display_name ? t("manage.account.nameSaved", { name: me.display_name }) : t("manage.account.nameCleared", { id: me.id }));
        } catch (err) {
          status.error(err);
        }
      },
    },
  },
  field(t("manage.account.displayName"), box, t("manage.account.displayNameHint", { id: me.id })),
  save, status.el);
  return h("section", { "aria-labelledby": "acc-name" }, h("h2", { id: "acc-name", class: "m-h2" }, t("manage.account.name")), form);
}

// filesSection shows the user's files against the quota, read afresh
// from GET /api/me (the copy the app started with is out of date after an
// upload). It stays hidden when the server stores no files.
function filesSection(ctx) {
  const status = statusLine();
  const body = h("div", { "data-test": "my-files" });
  const el = h("section", { "aria-labelledby": "acc-files", hidden: true },
    h("h2", { id: "acc-files", class: "m-h2" }, t("manage.account.files")), body, status.el);
  (async () => {
    try {
      const r = await ctx.api("GET", url.me());
      const f = r.files;
      if (!f) return;
      clear(body);
      body.setAttribute("data-bytes", String(f.bytes));
      body.append(
        h("p", { class: "m-usage" }, usageMeter(f, t("manage.account.yourFiles")), " ", h("span", { "data-test": "my-files-used" }, t("manage.account.used", { usage: usageText(f) }))),
        h("p", { class: "m-hint" }, t("manage.account.filesHint", { max: humanSize(f.max_file_size) })));
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
  const save = h("button", { type: "submit", "data-test": "change-password" }, t("manage.account.changePassword"));
  const form = h("form", {
    class: "m-form",
    on: {
      submit: async (e) => {
        e.preventDefault();
        // The server counts characters, not UTF-16 units (minlength).
        if (Array.from(next.value).length < 8) {
          status.error({ code: "INVALID_ARGUMENT" }, { INVALID_ARGUMENT: t("manage.account.tooShort") });
          next.focus();
          return;
        }
        if (next.value !== again.value) {
          status.error({ code: "INVALID_ARGUMENT" }, { INVALID_ARGUMENT: t("manage.account.mismatch") });
          again.focus();
          return;
        }
        try {
          await busy(save, ctx.api("POST", url.password(), { current: current.value, new: next.value }));
          current.value = next.value = again.value = "";
          status.show(t("manage.account.passwordChanged"));
          document.dispatchEvent(new CustomEvent("parley:sessions"));
        } catch (err) {
          // The lengths were checked here: what the server refuses is the
          // current password.
          status.error(err, { INVALID_ARGUMENT: t("manage.account.wrongPassword") });
        }
      },
    },
  },
  field(t("manage.account.currentPassword"), current),
  field(t("manage.account.newPassword"), next, t("manage.account.newPasswordHint")),
  field(t("manage.account.newPasswordAgain"), again),
  save, status.el);
  return h("section", { "aria-labelledby": "acc-pw" }, h("h2", { id: "acc-pw", class: "m-h2" }, t("manage.account.password")), form);
}

function devicesSection(ctx) {
  const status = statusLine();
  const list = h("ul", { class: "m-list", "data-test": "sessions", "aria-label": t("manage.account.devicesLabel") });
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
    h("h2", { id: "acc-dev", class: "m-h2" }, t("manage.account.devices")),
    h("p", { class: "m-hint" }, t("manage.account.devicesHint")),
    list, status.el);
  el.dispose = () => document.removeEventListener("parley:sessions", load);
  load();
  return el;
}

function sessionRow(ctx, s, status, reload) {
  const row = h("li", { class: "m-item", "data-test": "session-" + s.device_id, "data-current": s.current ? "true" : "false" },
    h("span", { class: "m-name" }, s.current ? t("manage.account.thisDevice", { device: s.device_id }) : s.device_id),
    " ",
    h("small", { class: "muted" }, t("manage.account.deviceTimes", { signedIn: when(s.created_at, "datetime"), seen: when(s.last_seen, "datetime") })));
  if (!s.current) {
    row.append(" ", button(t("manage.account.signOut"), async (e) => {
      const b = e.currentTarget;
      const ok = await confirmDialog(h, {
        title: t("manage.account.signOutTitle", { device: s.device_id }),
        body: t("manage.account.signOutBody"),
        ok: t("manage.account.signOutOk", { device: s.device_id }),
        cancel: t("manage.cancel"),
      });
      if (!ok) return;
      try {
        await busy(b, ctx.api("DELETE", url.session(s.device_id)));
        status.show(t("manage.account.signedOut", { device: s.device_id }));
        reload();
      } catch (err) {
        status.error(err);
      }
    }, { "aria-label": t("manage.account.signOutOk", { device: s.device_id }), "data-test": "signout-" + s.device_id }));
  }
  return row;
}
