// The operators' screens, for users with the admin role (the menu shows
// them only to admins; the server decides: anyone else who opens one gets
// its 403 "Access denied", shown as it is).
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
// overwrite it anyway).

import { h, clear } from "../dom.js";
import { url } from "../urls.js";
import { button, busy, field, input, screen, statusLine, usageMeter, usageText, when } from "./forms.js";

const pageSize = 50;

// pager keeps the cursors of a forward-paged listing so the user can go
// back: load(cursor) fetches a page and returns {next, more}.
function pager(load, status) {
  const back = []; // cursors of the pages before the current one
  let cur = "";
  let next = "";
  const prev = button("Previous", () => go(back.length ? back[back.length - 1] : "", "back"), { "data-test": "page-prev" });
  const fwd = button("Next", () => go(next, "forward"), { "data-test": "page-next" });
  const el = h("nav", { class: "m-pager", "aria-label": "Pages" }, prev, " ", fwd);
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
      status.error(err);
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
    h("thead", {}, h("tr", {}, heads.map((t) => h("th", { scope: "col" }, t)))),
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
  const status = statusLine();
  const users = table("Accounts in id order", ["Id", "Email", "Role", "Status", "Files", "Last seen", "Created", ""], "user-table");
  const content = h("div", { hidden: true });

  function row(u) {
    const state = h("span", { class: u.disabled ? "m-badge m-off" : "m-badge", "data-test": "user-status" },
      u.disabled ? "disabled" : "active");
    const toggle = button(u.disabled ? "Enable" : "Disable", () => setDisabled(u, !u.disabled, tr, toggle), {
      "data-test": `user-toggle-${u.id}`, "aria-label": `${u.disabled ? "Enable" : "Disable"} ${u.id}`,
      class: u.disabled ? "" : "m-danger",
    });
    const tr = h("tr", { "data-test": `user-${u.id}`, "data-disabled": u.disabled ? "true" : "false" },
      h("th", { scope: "row" }, u.id),
      cell(u.email || ""),
      cell(u.role),
      cell(state),
      cell(filesCell(u)),
      cell(when(u.last_seen)),
      cell(when(u.created_at)),
      cell(toggle));
    return tr;
  }

  // filesCell shows what the user's files take against the quota, as
  // the listing gave it (a disable or enable answers without it).
  function filesCell(u) {
    const f = u.files;
    if (!f) return "";
    return h("span", { class: "m-usage", "data-test": `user-files-${u.id}`, "data-bytes": String(f.bytes), "data-files": String(f.files) },
      usageMeter(f, `Files of ${u.id}`), " ", usageText(f));
  }

  async function setDisabled(u, disabled, tr, b) {
    status.show(`${disabled ? "Disabling" : "Enabling"} ${u.id}…`);
    try {
      const got = await busy(b, ctx.api("POST", url.adminUserDisabled(u.id, disabled)));
      tr.replaceWith(row(Object.assign({}, u, got)));
      status.show(`${u.id} is ${got.disabled ? "disabled: their sessions ended" : "enabled"}.`);
    } catch (err) {
      status.error(err);
    }
  }

  const pages = pager(async (after) => {
    const page = await ctx.api("GET", url.adminUsers(pageSize, after));
    clear(users.body);
    for (const u of page.items || []) users.body.append(row(u));
    users.loaded();
    content.hidden = false;
    return { next: page.next, more: page.has_more };
  }, status);

  content.append(
    users.el,
    pages.el,
    h("h2", { class: "m-h2" }, "Create a user"),
    createUserForm(ctx, status, () => pages.reload()),
  );
  const view = screen("Users", "admin-users", adminNav("/admin/users"), status.el, content);
  status.show("Loading…");
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
    h("option", { value: "user" }, "user"), h("option", { value: "admin" }, "admin"));
  const create = h("button", { type: "submit", class: "m-primary", "data-test": "create-user" }, "Create user");

  async function createUser(e) {
    e.preventDefault();
    const body = { id: id.value.trim(), role: role.value };
    if (email.value.trim()) body.email = email.value.trim();
    if (password.value) body.password = password.value;
    status.show(`Creating ${body.id}…`);
    try {
      const u = await busy(create, ctx.api("POST", url.adminUsers(), body));
      id.value = "";
      email.value = "";
      password.value = "";
      status.show(`Created ${u.id} (${u.role}).`);
      await reload();
    } catch (err) {
      status.error(err);
    }
  }

  return h("form", { class: "m-form m-grid", on: { submit: createUser } },
    field("User id", id, "Lower-case letters, digits, . _ - (up to 32)."),
    field("Email (optional)", email),
    field("Password", password, "Empty: an account that cannot log in (a webhook bot)."),
    field("Role", role),
    h("div", { class: "m-actions" }, create));
}

// renderAdminAudit is the view of /admin/audit.
export function renderAdminAudit(ctx) {
  const status = statusLine();
  const log = table("Operations, newest first", ["When", "Operator", "Action", "Target", "Outcome", "Parameters"], "audit-table");
  const content = h("div", { hidden: true }, log.el);
  const newer = []; // the before of each newer page
  let before = 0;
  let oldest = 0;
  const prev = button("Newer", () => load(newer.pop() || 0, true), { "data-test": "page-prev" });
  const next = button("Older", () => load(oldest, false), { "data-test": "page-next" });
  prev.disabled = true;
  next.disabled = true;
  content.append(h("nav", { class: "m-pager", "aria-label": "Pages" }, prev, " ", next));

  async function load(b, backwards) {
    try {
      const r = await ctx.api("GET", url.adminAudit(pageSize, b));
      const es = r.entries || [];
      clear(log.body);
      for (const e of es) {
        log.body.append(h("tr", { "data-test": "audit-entry", "data-action": e.action },
          cell(when(e.at)), cell(e.operator), cell(e.action), cell(e.target || ""),
          cell(h("span", { class: e.outcome === "ok" ? "m-badge" : "m-badge m-off" }, e.outcome)),
          cell(h("code", { class: "m-params" }, e.params))));
      }
      if (es.length === 0) log.body.append(h("tr", {}, h("td", { colspan: "6", class: "m-hint" }, "No entries.")));
      if (!backwards && b !== before) newer.push(before);
      before = b;
      oldest = es.length ? es[es.length - 1].id : 0;
      prev.disabled = before === 0;
      next.disabled = es.length < pageSize;
      log.loaded();
      content.hidden = false;
      status.clear();
    } catch (err) {
      status.error(err);
    }
  }

  const view = screen("Audit log", "admin-audit", adminNav("/admin/audit"), status.el, content);
  status.show("Loading…");
  load(0, true);
  return view;
}

// renderAdminConvs is the view of /admin/convs.
export function renderAdminConvs(ctx) {
  const status = statusLine();
  const convs = table("Conversations in id order", ["Id", "Title", "Kind", "Members", "Head", "Retention", ""], "conv-table");
  const editor = h("section", { class: "m-card", "data-test": "retention-editor", "aria-live": "polite", hidden: true });
  const content = h("div", { hidden: true });

  function row(c) {
    return h("tr", { "data-test": `conv-${c.id}` },
      h("th", { scope: "row" }, c.id),
      cell(c.title), cell(c.kind), cell(String(c.members ?? "")), cell(String(c.head)),
      cell(retentionText(c.retention)),
      cell(button("Retention", () => openConv(c.id), { "data-test": `retention-${c.id}`, "aria-label": `Retention of ${c.id}` })));
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
    status.show(`Loading ${id}…`);
    let c;
    try {
      c = await ctx.api("GET", url.adminConv(id));
    } catch (err) {
      status.error(err);
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
      if (old) old.replaceWith(row(Object.assign({ members: old.children[3].textContent }, got)));
    });
  }

  const lookup = input({ type: "text", autocomplete: "off", spellcheck: "false", "data-test": "conv-lookup" });
  const open = h("button", { type: "submit", "data-test": "conv-open" }, "Open");
  content.append(
    h("form", { class: "m-form m-row", on: { submit: (e) => { e.preventDefault(); if (lookup.value.trim()) openConv(lookup.value.trim()); } } },
      field("Conversation id", lookup), open),
    editor,
    h("h2", { class: "m-h2" }, "Conversations"),
    convs.el, pages.el,
  );
  const view = screen("Conversations", "admin-convs", adminNav("/admin/convs"), status.el, content);
  status.show("Loading…");
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
  const save = h("button", { type: "submit", class: "m-primary", "data-test": "retention-save" }, "Save retention");
  async function submit(e) {
    e.preventDefault();
    const age = durationText(maxAge.value);
    const keep = Number(keepLast.value || "0");
    if (!Number.isInteger(keep) || keep < 0) {
      status.show("Keep last must be a whole number, 0 or more.");
      keepLast.focus();
      return;
    }
    status.show(`Saving the retention of ${c.id}…`);
    try {
      const got = await busy(save, ctx.api("PUT", url.adminRetention(c.id), { max_age: age, keep_last: keep }));
      status.show(`Retention of ${c.id}: ${retentionText(got.retention)}.`);
      saved(got);
    } catch (err) {
      status.error(err);
    }
  }
  editor.append(
    h("h2", { class: "m-h2", tabindex: "-1" }, `Conversation ${c.id}`),
    h("dl", { class: "m-dl" },
      h("dt", {}, "Title"), h("dd", {}, c.title || ""),
      h("dt", {}, "Kind"), h("dd", {}, c.kind),
      h("dt", {}, "Owner"), h("dd", {}, c.owner || "none"),
      h("dt", {}, "Events"), h("dd", {}, `seq ${c.min_seq}–${c.head} (epoch ${c.epoch})`),
      h("dt", {}, "Created"), h("dd", {}, when(c.created_at)),
      h("dt", {}, "Retention"), h("dd", { "data-test": "retention-current" }, retentionText(ret))),
    h("form", { class: "m-form m-grid", on: { submit } },
      field("Maximum age", maxAge, "A duration such as 720h or 30d; empty: no age limit."),
      field("Keep last", keepLast, "Keep at least the newest N events; 0: no count limit."),
      h("div", { class: "m-actions" }, save)),
    h("p", { class: "m-hint" }, "The retention worker applies the policy; messages it removes are gone for everyone."),
  );
  editor.hidden = false;
  editor.querySelector("h2").focus();
}

// adminNav links the three admin screens, marking the current one.
function adminNav(current) {
  const links = [["/admin/users", "Users"], ["/admin/audit", "Audit log"], ["/admin/convs", "Conversations"]];
  return h("nav", { class: "m-tabs", "aria-label": "Administration" },
    links.map(([path, label]) => h("a", { href: path, "aria-current": path === current ? "page" : false }, label)));
}

// retentionText says a policy in words.
function retentionText(r) {
  const parts = [];
  if (r && r.max_age) parts.push(`older than ${ageText(r.max_age)} removed`);
  if (r && r.keep_last) parts.push(`newest ${r.keep_last} kept`);
  return parts.length ? parts.join(", ") : "kept forever";
}

// ageText shortens a Go duration ("720h0m0s") to days or hours when exact.
function ageText(d) {
  const m = /^(\d+)h0m0s$/.exec(d);
  if (m) {
    const hrs = Number(m[1]);
    return hrs % 24 === 0 ? `${hrs / 24} d` : `${hrs} h`;
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
