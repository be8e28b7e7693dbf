// The members screen (/c/{id}/members): who is in a conversation, add a
// member (POST /api/convs/{id}/members {user}), remove one
// (DELETE /api/convs/{id}/members/{user}: the owner, an admin, or the user
// themself) and leave (the same DELETE with one's own id). It is the
// conversation's settings too: the user's notification level for it (all
// messages, mentions only, none: GET /api/push/settings, PUT
// /api/push/settings/{id}); a server without push shows no such setting.
//
// The API has no member listing for members (the store's ConvMembers is
// reached only by operators' `parley conv show`), so the list is worked out
// from the member_joined and member_left events of the history the caller
// can see, read page by page with the sync route. That history is
// incomplete when the caller joined after others (events before their
// join are not theirs to see), when a retention purge removed its start,
// or when it is longer than the pages read here; the screen then says the
// list may be incomplete instead of presenting a guess as the truth.
//
// The screen offers only what the server allows (CheckMemberChange): any
// member, or an admin, may add; the owner or an admin may remove others;
// a member may leave; a direct conversation's members never change. The
// owner is the sender of the history's first event (the creator's joins
// at seq 1), so a caller who cannot see the start of the history is
// offered no removal unless they are an admin. Removing and leaving ask
// first. The server stays the judge: a refusal shows as a sentence.

import { h, clear } from "../dom.js";
import { url } from "../urls.js";
import { avatarEl, nameEl, nameOf } from "../names.js";
import { t, number } from "../i18n.js";
import { confirmDialog } from "./confirm.js";
import { button, busy, field, input, screen, statusLine } from "./forms.js";

// maxPages bounds the history read to build the list (MaxPage = 200 events
// each): a members screen must not read 100,000 events.
const maxPages = 25;
const pageSize = 200;

// readMembers replays the membership events of conv visible to the caller:
// {members: Set, complete: bool, why: "long"|"start"|"", owner: string}.
// owner is the creator (the sender of seq 1) when the start is visible.
export async function readMembers(api, conv) {
  const members = new Set();
  let after = 0;
  let first = true;
  let complete = true;
  let why = "";
  let owner = "";
  for (let i = 0; ; i++) {
    if (i === maxPages) {
      complete = false;
      why = "long";
      break;
    }
    const page = await api("GET", url.events(conv, after, pageSize));
    const events = page.events || [];
    if (first) {
      first = false;
      if (page.trimmed || (events.length > 0 && events[0].seq > 1)) {
        complete = false;
        why = "start";
      } else if (events.length > 0 && events[0].kind === "member_joined") {
        owner = events[0].sender || "";
      }
    }
    for (const ev of events) {
      if (ev.kind === "member_joined" && ev.user) members.add(ev.user);
      if (ev.kind === "member_left" && ev.user) members.delete(ev.user);
    }
    if (!page.has_more || events.length === 0) break;
    after = page.next_after || events[events.length - 1].seq;
  }
  return { members, complete, why, owner };
}

// renderMembers is the view of /c/{id}/members.
export function renderMembers(ctx, params) {
  return new MembersView(ctx, params.id).view;
}

// MembersView is the members screen of one conversation while it is on
// the page.
class MembersView {
  constructor(ctx, conv) {
    this.ctx = ctx;
    this.conv = conv;
    this.me = ctx.me && ctx.me.user ? ctx.me.user.id : "";
    this.admin = !!(ctx.me && ctx.me.user && ctx.me.user.role === "admin");
    // The kind and title come from the core's list, which may still be
    // loading when the page was opened at this path: until then the screen
    // names the conversation by id and shows no controls.
    this.summary = findConv(ctx, conv);
    this.direct = !!this.summary && this.summary.kind === "direct";
    this.label = this.summary && this.summary.title ? this.summary.title : conv;
    this.last = null; // the last list read

    this.status = statusLine();
    this.list = h("ul", { class: "m-list", "data-test": "member-list", "aria-label": t("manage.members.listLabel") });
    this.note = h("p", { class: "m-hint", "data-test": "member-note" });
    this.who = input({ type: "text", autocomplete: "off", autocapitalize: "none", spellcheck: "false", "data-test": "add-member-input" });
    this.add = h("button", { type: "submit", "data-test": "add-member" }, t("manage.members.add"));
    this.heading = h("span", {}, t("manage.members.title", { conv: this.label }));
    this.back = h("a", { href: `/c/${encodeURIComponent(conv)}`, "data-test": "back-to-conv" }, t("manage.members.back", { conv: this.label }));
    this.controls = h("div", { "data-test": "member-controls" });
    this.notify = h("div", { "data-test": "notify-settings" });

    this.view = screen(this.heading, "members",
      h("p", { class: "m-sub" }, this.back),
      this.status.el,
      this.note, this.list, this.controls, this.notify);
    this.drawLevel();
    if (!this.summary && ctx.client && ctx.client.on) {
      const off = ctx.client.on("convs", () => {
        if (this.named()) off();
        else if (this.last) this.draw(this.last); // loaded without it: the reads decide
      });
      this.view.dispose = off;
    }
    this.refresh();
  }

  async refresh() {
    try {
      this.draw(await readMembers(this.ctx.api, this.conv));
    } catch (err) {
      clear(this.list);
      this.status.error(err);
    }
  }

  // allowed says what the caller may do here, as the server decides it;
  // null until both the kind (the core's list) and the members are known.
  allowed() {
    const got = this.last;
    if (!got) return null;
    if (!this.summary) {
      // A conversation the loaded list does not name (it changed since):
      // the members read decide.
      const loaded = this.ctx.client && this.ctx.client.conversationsLoaded && this.ctx.client.conversationsLoaded();
      if (!loaded) return null;
    }
    const member = got.members.has(this.me) || !!(this.summary && this.summary.member);
    const change = !this.direct;
    return {
      add: change && (member || this.admin),
      removeOthers: change && (this.admin || (!!got.owner && got.owner === this.me)),
      leave: change && member,
    };
  }

  draw(got) {
    const me = this.me;
    this.last = got;
    const may = this.allowed();
    clear(this.list);
    const ids = Array.from(got.members).sort();
    for (const id of ids) {
      const row = h("li", { class: "m-item", "data-test": `member-${id}` },
        h("span", { class: "m-person" }, avatarEl(h, id),
          h("span", { class: "m-name" }, nameEl(h, id), " ", h("span", { class: "muted" }, "@" + id),
            id === me ? t("manage.members.you") : "",
            id === got.owner ? t("manage.members.owner") : "")));
      if (may && may.removeOthers && id !== me) {
        row.append(button(t("manage.members.remove"), (e) => this.remove(id, e.currentTarget),
          { "aria-label": t("manage.members.removeOk", { name: nameOf(id) }), "data-test": `remove-${id}` }));
      }
      this.list.append(row);
    }
    if (ids.length === 0) this.list.append(h("li", { class: "m-item m-hint" }, t("manage.members.none")));
    this.list.setAttribute("data-loaded", "true");
    this.note.textContent = got.complete ? t("manage.members.complete")
      : got.why === "long" ? t("manage.members.incompleteLong", { count: number(maxPages * pageSize) })
      : t("manage.members.incompleteStart");
    this.drawControls();
  }

  // remove takes id out (b is the button pressed) once the user confirms;
  // focus goes to the id field, since the row pressed may be gone.
  async remove(id, b) {
    const name = nameOf(id);
    const self = id === this.me;
    if (self) return this.askLeave(b);
    const ok = await confirmDialog(h, {
      title: t("manage.members.removeTitle", { name, conv: this.label }),
      body: t("manage.members.removeBody"),
      ok: t("manage.members.removeOk", { name }),
      cancel: t("manage.cancel"),
    });
    if (!ok) return;
    this.status.show(t("manage.members.removing", { name }));
    try {
      const r = await busy(b, this.ctx.api("DELETE", url.member(this.conv, id)));
      this.status.show(r.changed ? t("manage.members.removed", { name }) : t("manage.members.notMember", { name }));
      await this.refresh();
      if (this.who.isConnected) this.who.focus();
    } catch (err) {
      this.status.error(err, { PERMISSION_DENIED: t("manage.members.removeDenied") });
    }
  }

  // removeTyped removes the id typed in the field: the way to reach a
  // member the list could not show.
  removeTyped(e) {
    const id = this.who.value.trim().toLowerCase();
    if (!id) {
      this.who.focus();
      return;
    }
    this.who.value = "";
    this.remove(id, e.currentTarget);
  }

  async addMember(e) {
    e.preventDefault();
    const id = this.who.value.trim().toLowerCase();
    if (!id) {
      this.who.focus();
      return;
    }
    this.status.show(t("manage.members.adding", { name: id }));
    try {
      const r = await busy(this.add, this.ctx.api("POST", url.members(this.conv), { user: id }));
      this.who.value = "";
      this.status.show(r.changed ? t("manage.members.added", { name: nameOf(id) }) : t("manage.members.already", { name: nameOf(id) }));
      await this.refresh();
    } catch (err) {
      this.status.error(err, { NOT_FOUND: t("manage.members.noUser", { id }) });
    }
  }

  // askLeave asks in a dialog, then leaves and goes back to the list.
  async askLeave(b) {
    const ok = await confirmDialog(h, {
      title: t("manage.members.leaveTitle", { conv: this.label }),
      body: t("manage.members.leaveBody"),
      ok: t("manage.members.leaveOk", { conv: this.label }),
      cancel: t("manage.cancel"),
    });
    if (!ok) return;
    const ctx = this.ctx;
    this.status.show(t("manage.members.leaving"));
    try {
      await busy(b, ctx.api("DELETE", url.member(this.conv, this.me)));
    } catch (err) {
      this.status.error(err);
      return;
    }
    if (ctx.client && ctx.client.refreshConversations) ctx.client.refreshConversations();
    if (ctx.toast) ctx.toast(t("manage.members.left", { conv: this.label }));
    ctx.navigate("/");
  }

  // drawControls shows what the caller may do: nothing of a direct
  // conversation, adding for members, removing for the owner and admins,
  // leaving for members.
  drawControls() {
    const controls = this.controls;
    const may = this.allowed();
    clear(controls);
    if (!may) return;
    if (this.direct) {
      controls.append(h("p", { class: "m-hint" }, t("manage.members.directFixed")));
      return;
    }
    if (may.add || may.removeOthers) {
      const focused = document.activeElement === this.who;
      controls.append(
        h("h2", { class: "m-h2" }, may.removeOthers ? t("manage.members.addOrRemove") : t("manage.members.addHeading")),
        h("form", { class: "m-form m-row", on: { submit: (e) => this.addMember(e) } },
          field(t("manage.members.userId"), this.who, t("manage.members.userIdHint")),
          may.add ? this.add : null,
          may.removeOthers ? button(t("manage.members.remove"), (e) => this.removeTyped(e), { "data-test": "remove-typed" }) : null));
      if (focused) this.who.focus();
    }
    if (may.leave) {
      controls.append(h("h2", { class: "m-h2" }, t("manage.members.leaveHeading")),
        h("div", { class: "m-actions" },
          button(t("manage.members.leave"), (e) => this.askLeave(e.currentTarget), { class: "m-danger", "data-test": "leave" })));
    }
  }

  // drawLevel shows the notification level once the server said it has
  // one (nothing on a 404: no push there; an error leaves it out too).
  async drawLevel() {
    let level = "all";
    try {
      const got = await this.ctx.api("GET", url.pushLevel());
      for (const st of (got && got.settings) || []) if (st.conv === this.conv) level = st.level;
    } catch {
      return;
    }
    const pick = h("select", { "data-test": "notify-level", on: { change: () => this.setLevel(pick) } },
      [["all", t("manage.members.levelAll")], ["mentions", t("manage.members.levelMentions")], ["none", t("manage.members.levelNone")]].map(([v, label]) =>
        h("option", { value: v, selected: v === level }, label)));
    clear(this.notify).append(h("h2", { class: "m-h2" }, t("manage.members.notifications")),
      field(t("manage.members.notifyMe"), pick, t("manage.members.notifyHint")));
  }

  async setLevel(pick) {
    const level = pick.value;
    try {
      await busy(pick, this.ctx.api("PUT", url.pushLevel(this.conv), { level }));
      this.status.show(level === "all" ? t("manage.members.levelAllSet") : level === "none" ? t("manage.members.levelNoneSet") : t("manage.members.levelMentionsSet"));
    } catch (err) {
      this.status.error(err);
    }
  }

  named() {
    this.summary = findConv(this.ctx, this.conv);
    if (!this.summary) return false;
    this.direct = this.summary.kind === "direct";
    this.label = this.summary.title || this.conv;
    this.heading.textContent = t("manage.members.title", { conv: this.label });
    this.back.textContent = t("manage.members.back", { conv: this.label });
    if (this.last) this.draw(this.last);
    return true;
  }
}

// findConv returns the core's summary of conv, if it has one.
function findConv(ctx, conv) {
  try {
    const all = ctx.client && ctx.client.conversations ? ctx.client.conversations() : [];
    return (all || []).find((c) => c.conv === conv || c.id === conv);
  } catch {
    return undefined;
  }
}
