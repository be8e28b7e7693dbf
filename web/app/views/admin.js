// The operators' screens, for users with the admin role (the menu shows
// them only to admins; the server decides: anyone else who opens one gets
// its 403, shown as the sentence that only administrators may open it).
//
//   /admin/users  GET /api/admin/users?limit=&after= (paged; each user's
//                 files against the quota in force), create
//                 (POST /api/admin/users), disable and enable
//                 (POST /api/admin/users/{id}/disable|enable)
//   /admin/audit  GET /api/admin/audit?limit=&before= (newest first)
//   /admin/convs  GET /api/admin/convs?limit=&after= (paged), one
//                 conversation (GET /api/admin/convs/{id}) and its retention
//                 (PUT /api/admin/convs/{id}/retention {max_age, keep_last})
//
// Every operations call, reads included, lands in the audit log under the
// signed-in operator; the screens send no operator field (the server would
// overwrite it anyway). Disabling an account and setting a retention that
// removes messages ask first.

import { h, clear } from "../dom.js";
import { url } from "../urls.js";
import { avatarEl, nameEl, nameOf, setName } from "../names.js";
import { t, when, number, errorText } from "../i18n.js";
import { confirmDialog } from "./confirm.js";
import { button, busy, field, input, screen, statusLine, usageMeter, usageText } from "./forms.js";

const pageSize = 50;

// pager keeps the cursors of a forward-paged listing so the user can go
// back: load(cursor) fetches a page and returns {next, more}.
function pager(load, status) {
  const back = []; // cursors of the pages before the current one
  let cur = "";
  let next = "";
  const prev = button(t("manage.admin.previous"), () => go(back.length ? back[back.length - 1] : "", "back"), { "data-test": "page-prev" });
  const fwd = button(t("manage.admin.next"), () => go(next, "forward"), { "data-test": "page-next" });
  const el = h("nav", { class: "m-pager", "aria-label": t("manage.admin.pages") }, prev, " ", fwd);
  prev.disabled = true;
  fwd.disabled = true;

  // go loads the page at cursor; the cursor stack changes only once the
  // page is in, so a failed load leaves the user where they were.
  async function go(cursor, move) {
    try {
      const r = await load(cursor);
      if (move === "forward") back.push(cur);
      if (move === "back") back.pop();
      cur = cursor;
      next = r.more ? r.next : "";
      prev.disabled = cur === "" && back.length === 0;
      fwd.disabled = !next;
      return true;
    } catch (err) {
      adminError(status, err);
      return false;
    }
  }
  return { el, first: () => go("", "stay"), reload: () => go(cur, "stay") };
}

// table builds a table with a caption and column headers in a scrolling
// box (wide tables scroll inside it, not the page, at 360 px); the caller
// fills its tbody.
function table(caption, heads, test) {
  const body = h("tbody", {});
  const tbl = h("table", { class: "m-table", "data-test": test },
    h("caption", { class: "m-hint" }, caption),
    h("thead", {}, h("tr", {}, heads.map((x) => h("th", { scope: "col" }, x)))),
    body);
  // loaded marks the table once a page is in it (tests wait on it).
  const loaded = () => tbl.setAttribute("data-loaded", "true");
  return { el: h("div", { class: "m-scroll" }, tbl), body, loaded };
}

function cell(...children) {
  return h("td", {}, ...children);
}

// renderAdminUsers is the view of /admin/users.
export function renderAdminUsers(ctx) {
  const me = ctx.me && ctx.me.user ? ctx.me.user.id : "";
  const status = statusLine();
  const users = table(t("manage.admin.usersCaption"), [t("manage.admin.user"), t("manage.admin.email"), t("manage.admin.role"),
    t("manage.admin.status"), t("manage.admin.files"), t("manage.admin.lastSeen"), t("manage.admin.created"), h("span", { class: "m-sr" }, t("manage.admin.actions"))], "user-table");
  const content = h("div", { hidden: true });

  function row(u) {
    const state = h("span", { class: u.disabled ? "m-badge m-off" : "m-badge", "data-test": "user-status" },
      u.disabled ? t("manage.admin.disabled") : t("manage.admin.active"));
    const toggle = button(u.disabled ? t("manage.admin.enable") : t("manage.admin.disable"), () => setDisabled(u, !u.disabled, tr, toggle), {
      "data-test": `user-toggle-${u.id}`,
      "aria-label": u.disabled ? t("manage.admin.enableUser", { name: nameOf(u.id) }) : t("manage.admin.disableUser", { name: nameOf(u.id) }),
      class: u.disabled ? "" : "m-danger",
    });
    const tr = h("tr", { "data-test": `user-${u.id}`, "data-disabled": u.disabled ? "true" : "false" },
      h("th", { scope: "row" }, h("span", { class: "m-person" }, avatarEl(h, u.id),
        h("span", { class: "m-name" }, nameEl(h, u.id), h("br"), h("span", { class: "muted" }, "@" + u.id)))),
      cell(u.email || ""),
      cell(u.role === "admin" ? t("manage.admin.roleAdmin") : t("manage.admin.roleUser")),
      cell(state),
      cell(filesCell(u)),
      cell(when(u.last_seen, "datetime")),
      cell(when(u.created_at, "datetime")),
      // No Disable on one's own row: it would end this very session.
      cell(u.id === me ? "" : toggle));
    return tr;
  }

  // filesCell shows what the user's files take against the quota, as
  // the listing gave it (a disable or enable answers without it).
  function filesCell(u) {
    const f = u.files;
    if (!f) return "";
    return h("span", { class: "m-usage", "data-test": `user-files-${u.id}`, "data-bytes": String(f.bytes), "data-files": String(f.files) },
      usageMeter(f, t("manage.admin.filesOf", { name: nameOf(u.id) })), " ", usageText(f));
  }

  // setDisabled disables (after asking: it ends the user's sessions at
  // once) or enables u.
  async function setDisabled(u, disabled, tr, b) {
    const name = nameOf(u.id);
    if (disabled && !(await confirmDialog(h, {
      title: t("manage.admin.disableTitle", { name }),
      body: t("manage.admin.disableBody"),
      ok: t("manage.admin.disableUser", { name }),
      cancel: t("manage.cancel"),
    }))) return;
    status.show(disabled ? t("manage.admin.disabling", { name }) : t("manage.admin.enabling", { name }));
    try {
      const got = await busy(b, ctx.api("POST", url.adminUserDisabled(u.id, disabled)));
      tr.replaceWith(row(Object.assign({}, u, got)));
      status.show(got.disabled ? t("manage.admin.disabledDone", { name }) : t("manage.admin.enabledDone", { name }));
    } catch (err) {
      adminError(status, err);
    }
  }

  const pages = pager(async (after) => {
    // The page's names come from one directory read over the same ids
    // (cursors are shared), not one lookup per row.
    const [page] = await Promise.all([ctx.api("GET", url.adminUsers(pageSize, after)), knownNames(ctx, after)]);
    clear(users.body);
    for (const u of page.items || []) users.body.append(row(u));
    users.loaded();
    content.hidden = false;
    return { next: page.next, more: page.has_more };
  }, status);

  content.append(
    users.el,
    pages.el,
    h("h2", { class: "m-h2" }, t("manage.admin.createHeading")),
    createUserForm(ctx, status, () => pages.reload()),
  );
  const view = screen(t("manage.admin.usersTitle"), "admin-users", adminNav("/admin/users"), status.el, content);
  status.show(t("manage.loading"));
  pages.first().then((ok) => ok && status.clear());
  return view;
}

// createUserForm is the form that creates an account; reload shows the
// listing again once the account is made.
function createUserForm(ctx, status, reload) {
  const id = input({ type: "text", required: true, autocomplete: "off", autocapitalize: "none", spellcheck: "false", maxlength: "32", "data-test": "new-user-id" });
  const email = input({ type: "email", autocomplete: "off", "data-test": "new-user-email" });
  const password = input({ type: "password", autocomplete: "new-password", "data-test": "new-user-password" });
  const role = h("select", { "data-test": "new-user-role" },
    h("option", { value: "user" }, t("manage.admin.roleUser")), h("option", { value: "admin" }, t("manage.admin.roleAdmin")));
  const create = h("button", { type: "submit", class: "m-primary", "data-test": "create-user" }, t("manage.admin.createUser"));

  async function createUser(e) {
    e.preventDefault();
    const body = { id: id.value.trim(), role: role.value };
    if (email.value.trim()) body.email = email.value.trim();
    if (password.value) body.password = password.value;
    status.show(t("manage.admin.creating", { id: body.id }));
    try {
      const u = await busy(create, ctx.api("POST", url.adminUsers(), body));
      id.value = "";
      email.value = "";
      password.value = "";
      status.show(u.role === "admin" ? t("manage.admin.createdAdmin", { id: u.id }) : t("manage.admin.createdUser", { id: u.id }));
      await reload();
    } catch (err) {
      adminError(status, err, { INVALID_ARGUMENT: t("manage.admin.createInvalid"), ALREADY_EXISTS: t("manage.admin.userExists") });
    }
  }

  return h("form", { class: "m-form m-grid", on: { submit: createUser } },
    field(t("manage.admin.userId"), id, t("manage.admin.userIdHint")),
    field(t("manage.admin.emailOptional"), email),
    field(t("manage.admin.password"), password, t("manage.admin.passwordHint")),
    field(t("manage.admin.role"), role),
    h("div", { class: "m-actions" }, create));
}

// renderAdminAudit is the view of /admin/audit.
export function renderAdminAudit(ctx) {
  const status = statusLine();
  const log = table(t("manage.admin.auditCaption"), [t("manage.admin.when"), t("manage.admin.operator"), t("manage.admin.action"),
    t("manage.admin.target"), t("manage.admin.outcome"), t("manage.admin.params")], "audit-table");
  const content = h("div", { hidden: true }, log.el);
  const newer = []; // the before of each newer page
  let before = 0;
  let oldest = 0;
  const prev = button(t("manage.admin.newer"), () => load(newer.pop() || 0, true), { "data-test": "page-prev" });
  const next = button(t("manage.admin.older"), () => load(oldest, false), { "data-test": "page-next" });
  prev.disabled = true;
  next.disabled = true;
  content.append(h("nav", { class: "m-pager", "aria-label": t("manage.admin.pages") }, prev, " ", next));

  async function load(b, backwards) {
    try {
      const r = await ctx.api("GET", url.adminAudit(pageSize, b));
      const es = r.entries || [];
      clear(log.body);
      for (const e of es) {
        log.body.append(h("tr", { "data-test": "audit-entry", "data-action": e.action },
          cell(when(e.at, "datetime")), cell(e.operator), cell(e.action), cell(e.target || ""),
          cell(outcomeBadge(e.outcome)),
          cell(h("code", { class: "m-params" }, e.params))));
      }
      if (es.length === 0) log.body.append(h("tr", {}, h("td", { colspan: "6", class: "m-hint" }, t("manage.admin.noEntries"))));
      if (!backwards && b !== before) newer.push(before);
      before = b;
      oldest = es.length ? es[es.length - 1].id : 0;
      prev.disabled = before === 0;
      next.disabled = es.length < pageSize;
      log.loaded();
      content.hidden = false;
      status.clear();
    } catch (err) {
      adminError(status, err);
    }
  }

  const view = screen(t("manage.admin.auditTitle"), "admin-audit", adminNav("/admin/audit"), status.el, content);
  status.show(t("manage.loading"));
  load(0, true);
  return view;
}

// renderAdminConvs is the view of /admin/convs.
export function renderAdminConvs(ctx) {
  const status = statusLine();
  const convs = table(t("manage.admin.convsCaption"), [t("manage.admin.convId"), t("manage.admin.convTitle"), t("manage.admin.kind"),
    t("manage.admin.members"), t("manage.admin.head"), t("manage.admin.retention"), h("span", { class: "m-sr" }, t("manage.admin.actions"))], "conv-table");
  const editor = h("section", { class: "m-card", "data-test": "retention-editor", "aria-live": "polite", hidden: true });
  const content = h("div", { hidden: true });

  function row(c) {
    return h("tr", { "data-test": `conv-${c.id}` },
      h("th", { scope: "row" }, c.id),
      cell(c.title), cell(kindText(c.kind)), cell(c.members == null ? "" : number(c.members)), cell(number(c.head)),
      cell(retentionText(c.retention)),
      cell(button(t("manage.admin.retention"), () => openConv(c.id), { "data-test": `retention-${c.id}`, "aria-label": t("manage.admin.retentionOf", { conv: c.title || c.id }) })));
  }

  const pages = pager(async (after) => {
    const page = await ctx.api("GET", url.adminConvs(pageSize, after));
    clear(convs.body);
    for (const c of page.items || []) convs.body.append(row(c));
    convs.loaded();
    content.hidden = false;
    return { next: page.next, more: page.has_more };
  }, status);

  // openConv shows one conversation's header and its retention form.
  async function openConv(id) {
    status.show(t("manage.admin.loadingConv", { conv: id }));
    let c;
    try {
      c = await ctx.api("GET", url.adminConv(id));
    } catch (err) {
      adminError(status, err, { NOT_FOUND: t("manage.admin.noConv", { conv: id }), INVALID_ARGUMENT: t("manage.admin.noConv", { conv: id }) });
      return;
    }
    status.clear();
    drawEditor(c);
  }

  // drawEditor shows conversation c in the editor; after a save, again
  // with the new policy, and its row of the table too.
  function drawEditor(c) {
    retentionEditor(ctx, status, editor, c, (got) => {
      drawEditor(got);
      const old = convs.body.querySelector(`tr[data-test="conv-${CSS.escape(c.id)}"]`);
      if (old) old.replaceWith(row(Object.assign({ members: c.members }, got)));
    });
  }

  const lookup = input({ type: "text", autocomplete: "off", spellcheck: "false", "data-test": "conv-lookup" });
  const open = h("button", { type: "submit", "data-test": "conv-open" }, t("manage.admin.open"));
  content.append(
    h("form", { class: "m-form m-row", on: { submit: (e) => { e.preventDefault(); if (lookup.value.trim()) openConv(lookup.value.trim()); } } },
      field(t("manage.admin.convId"), lookup), open),
    editor,
    h("h2", { class: "m-h2" }, t("manage.admin.convsTitle")),
    convs.el, pages.el,
  );
  const view = screen(t("manage.admin.convsTitle"), "admin-convs", adminNav("/admin/convs"), status.el, content);
  status.show(t("manage.loading"));
  pages.first().then((ok) => ok && status.clear());
  return view;
}

// retentionEditor fills editor with conversation c's header and its
// retention form; saved(got) runs once the server took a new policy.
function retentionEditor(ctx, status, editor, c, saved) {
  clear(editor);
  const ret = c.retention || {};
  const maxAge = input({ type: "text", autocomplete: "off", spellcheck: "false", "data-test": "retention-max-age" }, ret.max_age || "");
  const keepLast = input({ type: "number", min: "0", step: "1", "data-test": "retention-keep-last" }, String(ret.keep_last || 0));
  const save = h("button", { type: "submit", class: "m-primary", "data-test": "retention-save" }, t("manage.admin.saveRetention"));
  async function submit(e) {
    e.preventDefault();
    const age = durationText(maxAge.value);
    const keep = Number(keepLast.value || "0");
    if (!Number.isInteger(keep) || keep < 0) {
      status.show(t("manage.admin.keepWhole"));
      keepLast.focus();
      return;
    }
    // A policy removes messages for everyone, for good: ask first.
    if ((age || keep) && !(await confirmDialog(h, {
      title: t("manage.admin.retentionTitle", { conv: c.title || c.id }),
      body: t("manage.admin.retentionBody"),
      ok: t("manage.admin.retentionOk"),
      cancel: t("manage.cancel"),
    }))) return;
    status.show(t("manage.admin.savingRetention", { conv: c.title || c.id }));
    try {
      const got = await busy(save, ctx.api("PUT", url.adminRetention(c.id), { max_age: age, keep_last: keep }));
      status.show(t("manage.admin.retentionSaved", { conv: c.title || c.id, policy: retentionText(got.retention) }));
      saved(got);
    } catch (err) {
      adminError(status, err, { INVALID_ARGUMENT: t("manage.admin.retentionInvalid") });
    }
  }
  editor.append(
    h("h2", { class: "m-h2", tabindex: "-1" }, t("manage.admin.convHeading", { conv: c.title || c.id })),
    h("dl", { class: "m-dl" },
      h("dt", {}, t("manage.admin.convId")), h("dd", {}, c.id),
      h("dt", {}, t("manage.admin.convTitle")), h("dd", {}, c.title || ""),
      h("dt", {}, t("manage.admin.kind")), h("dd", {}, kindText(c.kind)),
      h("dt", {}, t("manage.admin.owner")), h("dd", {}, c.owner ? h("span", { class: "m-person" }, avatarEl(h, c.owner), nameEl(h, c.owner)) : t("manage.admin.noOwner")),
      h("dt", {}, t("manage.admin.events")), h("dd", {}, t("manage.admin.eventsRange", { from: number(c.min_seq), to: number(c.head), epoch: number(c.epoch) })),
      h("dt", {}, t("manage.admin.created")), h("dd", {}, when(c.created_at, "datetime")),
      h("dt", {}, t("manage.admin.retention")), h("dd", { "data-test": "retention-current" }, retentionText(ret))),
    h("form", { class: "m-form m-grid", on: { submit } },
      field(t("manage.admin.maxAge"), maxAge, t("manage.admin.maxAgeHint")),
      field(t("manage.admin.keepLast"), keepLast, t("manage.admin.keepLastHint")),
      h("div", { class: "m-actions" }, save)),
    h("p", { class: "m-hint" }, t("manage.admin.retentionHint")),
  );
  editor.hidden = false;
  editor.querySelector("h2").focus();
}

// adminNav links the three admin screens, marking the current one.
function adminNav(current) {
  const links = [["/admin/users", t("manage.admin.usersTitle")], ["/admin/audit", t("manage.admin.auditTitle")], ["/admin/convs", t("manage.admin.convsTitle")]];
  return h("nav", { class: "m-tabs", "aria-label": t("manage.admin.nav") },
    links.map(([path, label]) => h("a", { href: path, "aria-current": path === current ? "page" : false }, label)));
}

// retentionText says a policy in words.
function retentionText(r) {
  const parts = [];
  if (r && r.max_age) parts.push(t("manage.admin.olderRemoved", { age: ageText(r.max_age) }));
  if (r && r.keep_last) parts.push(t("manage.admin.newestKept", { n: r.keep_last, count: number(r.keep_last) }));
  return parts.length ? parts.join(t("manage.admin.and")) : t("manage.admin.keptForever");
}

// ageText shortens a Go duration ("720h0m0s") to days or hours when exact.
function ageText(d) {
  const m = /^(\d+)h0m0s$/.exec(d);
  if (m) {
    const hrs = Number(m[1]);
    return hrs % 24 === 0 ? t("manage.admin.days", { n: hrs / 24, count: number(hrs / 24) }) : t("manage.admin.hours", { n: hrs, count: number(hrs) });
  }
  return d;
}

// durationText turns "30d" (which Go's ParseDuration does not know) into
// hours; anything else goes to the server as typed, which judges it.
function durationText(v) {
  const s = v.trim();
  const m = /^(\d+)\s*d$/.exec(s);
  return m ? `${Number(m[1]) * 24}h` : s;
}

// kindText says a conversation's kind in words.
function kindText(kind) {
  return kind === "direct" ? t("manage.admin.kindDirect") : kind === "group" ? t("manage.admin.kindGroup") : kind;
}

// adminError shows err as a sentence; a 403 is the one that says only
// administrators may use these screens.
function adminError(status, err, special) {
  status.error(err, Object.assign({ PERMISSION_DENIED: t("manage.admin.denied") }, special || {}));
}

// knownNames records the display names of the directory page that starts
// after the cursor after (the users listing's cursor: both page by id),
// so the users table's names need no lookup each. An id of the listing's
// range the directory leaves out (disabled, or not visible) has none. A
// failure leaves the names to their own lookups.
async function knownNames(ctx, after) {
  try {
    const r = await ctx.api("GET", url.users("", pageSize, after || undefined));
    const users = (r && r.users) || [];
    for (const u of users) setName(u.id, u.display_name || "");
  } catch {
    // names.js looks each up instead
  }
}

// outcomeBadge says how an audited operation ended: done, still running,
// or the sentence of the error code it ended with (the code stays in
// data-code).
function outcomeBadge(outcome) {
  if (outcome === "ok") return h("span", { class: "m-badge" }, t("manage.admin.outcomeOk"));
  if (outcome === "pending") return h("span", { class: "m-badge" }, t("manage.admin.outcomePending"));
  return h("span", { class: "m-badge m-off", "data-code": outcome }, errorText(outcome));
}
