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
// list may be incomplete instead of presenting a guess as the truth. The
// server is the judge of every change: a refused one shows its reason.

import { h, clear } from "../dom.js";
import { url } from "../urls.js";
import { nameEl } from "../names.js";
import { button, busy, field, input, screen, statusLine } from "./forms.js";

// maxPages bounds the history read to build the list (MaxPage = 200 events
// each): a members screen must not read 100,000 events.
const maxPages = 25;
const pageSize = 200;

// readMembers replays the membership events of conv visible to the caller:
// {members: Set, complete: bool, why: string}.
export async function readMembers(api, conv) {
  const members = new Set();
  let after = 0;
  let first = true;
  let complete = true;
  let why = "";
  for (let i = 0; ; i++) {
    if (i === maxPages) {
      complete = false;
      why = `only the first ${maxPages * pageSize} events of the history were read`;
      break;
    }
    const page = await api("GET", url.events(conv, after, pageSize));
    const events = page.events || [];
    if (first) {
      first = false;
      if (page.trimmed || (events.length > 0 && events[0].seq > 1)) {
        complete = false;
        why = "the start of the history is not visible to you (you joined later, or it was purged)";
      }
    }
    for (const ev of events) {
      if (ev.kind === "member_joined" && ev.user) members.add(ev.user);
      if (ev.kind === "member_left" && ev.user) members.delete(ev.user);
    }
    if (!page.has_more || events.length === 0) break;
    after = page.next_after || events[events.length - 1].seq;
  }
  return { members, complete, why };
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
    // The kind and title come from the core's list, which may still be
    // loading when the page was opened at this path: until then the screen
    // names the conversation by id and shows no controls.
    this.summary = findConv(ctx, conv);
    this.direct = !!this.summary && this.summary.kind === "direct";
    this.label = this.summary && this.summary.title ? this.summary.title : conv;
    this.last = null; // the last list read

    this.status = statusLine();
    this.list = h("ul", { class: "m-list", "data-test": "member-list", "aria-label": "Members" });
    this.note = h("p", { class: "m-hint", "data-test": "member-note" });
    this.who = input({ type: "text", autocomplete: "off", autocapitalize: "none", spellcheck: "false", "data-test": "add-member-input" });
    this.add = h("button", { type: "submit", "data-test": "add-member" }, "Add");
    this.leaveBox = h("div", { class: "m-actions" });
    this.heading = h("span", {}, this.label);
    this.back = h("a", { href: `/c/${encodeURIComponent(conv)}`, "data-test": "back-to-conv" }, `Back to ${this.label}`);
    this.controls = h("div", { "data-test": "member-controls" });
    this.notify = h("div", { "data-test": "notify-settings" });

    this.view = screen(["Members of ", this.heading], "members",
      h("p", { class: "m-sub" }, this.back),
      this.status.el,
      this.note, this.list, this.controls, this.notify);
    this.drawLevel();
    if (this.summary) {
      this.drawControls();
    } else if (ctx.client && ctx.client.on) {
      const off = ctx.client.on("convs", () => {
        if (this.named()) off();
      });
      this.view.dispose = off;
    }
    this.refresh();
  }

  async refresh() {
    const ctx = this.ctx;
    try {
      const got = await readMembers(ctx.api, this.conv);
      this.draw(got);
      // A conversation the loaded list does not name (it changed since):
      // offer the group controls and let the server judge.
      const loaded = ctx.client && ctx.client.conversationsLoaded && ctx.client.conversationsLoaded();
      if (!this.summary && loaded && !this.controls.firstChild) this.drawControls();
    } catch (err) {
      clear(this.list);
      this.status.error(err);
    }
  }

  draw(got) {
    const me = this.me;
    this.last = got;
    clear(this.list);
    const ids = Array.from(got.members).sort();
    for (const id of ids) {
      const row = h("li", { class: "m-item", "data-test": `member-${id}` },
        h("span", { class: "m-name" }, nameEl(h, id), " ", h("span", { class: "muted" }, "@" + id), id === me ? " (you)" : ""));
      if (!this.direct && id !== me) {
        row.append(button("Remove", (e) => this.remove(id, e.currentTarget), { "aria-label": `Remove ${id}`, "data-test": `remove-${id}` }));
      }
      this.list.append(row);
    }
    if (ids.length === 0) this.list.append(h("li", { class: "m-item m-hint" }, "No members seen in the history you can see."));
    this.list.setAttribute("data-loaded", "true");
    this.note.textContent = got.complete
      ? "Everyone currently in the conversation."
      : `This list may be incomplete: ${got.why}. The API offers no member list; adding or removing someone by id still works.`;
  }

  // remove takes id out (b is the button pressed); focus goes to the id
  // field, since the row pressed may be gone.
  async remove(id, b) {
    this.status.show(`Removing ${id}…`);
    try {
      const r = await busy(b, this.ctx.api("DELETE", url.member(this.conv, id)));
      this.status.show(r.changed ? `${id} was removed.` : `${id} was not a member.`);
      await this.refresh();
      if (this.who.isConnected) this.who.focus();
    } catch (err) {
      this.status.error(err);
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
    this.status.show(`Adding ${id}…`);
    try {
      const r = await busy(this.add, this.ctx.api("POST", url.members(this.conv), { user: id }));
      this.who.value = "";
      this.status.show(r.changed ? `${id} was added.` : `${id} is already a member.`);
      await this.refresh();
    } catch (err) {
      this.status.error(err);
    }
  }

  // Leaving asks once more in place (no window.confirm: it blocks and is
  // not styled for the page).
  askLeave() {
    clear(this.leaveBox);
    const yes = button("Leave now", (e) => this.doLeave(e), { class: "m-danger", "data-test": "leave-confirm" });
    this.leaveBox.append(
      h("span", { class: "m-hint" }, `Leave “${this.label}”? You will no longer see new messages.`), " ",
      yes, " ",
      button("Cancel", () => { this.drawLeave(); }, { "data-test": "leave-cancel" }),
    );
    yes.focus();
  }

  async doLeave(e) {
    const ctx = this.ctx;
    this.status.show("Leaving…");
    try {
      await busy(e.currentTarget, ctx.api("DELETE", url.member(this.conv, this.me)));
    } catch (err) {
      this.status.error(err);
      return;
    }
    if (ctx.client && ctx.client.refreshConversations) ctx.client.refreshConversations();
    if (ctx.toast) ctx.toast(`You left ${this.label}.`);
    ctx.navigate("/");
  }

  drawLeave() {
    clear(this.leaveBox);
    this.leaveBox.append(button("Leave conversation", () => this.askLeave(), { class: "m-danger", "data-test": "leave" }));
  }

  // drawControls shows what the kind allows: a direct conversation's
  // members never change.
  drawControls() {
    const controls = this.controls;
    clear(controls);
    if (this.direct) {
      controls.append(h("p", { class: "m-hint" }, "The members of a direct conversation cannot change."));
      return;
    }
    controls.append(
      h("h2", { class: "m-h2" }, "Add or remove a member"),
      h("form", { class: "m-form m-row", on: { submit: (e) => this.addMember(e) } },
        field("User id", this.who, "There is no user directory: ask the person for their id."), this.add,
        button("Remove", (e) => this.removeTyped(e), { "data-test": "remove-typed" })),
      h("h2", { class: "m-h2" }, "Leave"),
      this.leaveBox,
    );
    this.drawLeave();
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
      [["all", "All messages"], ["mentions", "Only when I am mentioned"], ["none", "None"]].map(([v, label]) =>
        h("option", { value: v, selected: v === level }, label)));
    clear(this.notify).append(h("h2", { class: "m-h2" }, "Notifications"),
      field("Notify me of", pick, "Desktop notifications while the page is closed or hidden."));
  }

  async setLevel(pick) {
    const level = pick.value;
    try {
      await busy(pick, this.ctx.api("PUT", url.pushLevel(this.conv), { level }));
      this.status.show(level === "all" ? "You will be notified of every message." : level === "none" ? "You will not be notified." : "You will be notified when you are mentioned.");
    } catch (err) {
      this.status.error(err);
    }
  }

  named() {
    this.summary = findConv(this.ctx, this.conv);
    if (!this.summary) return false;
    this.direct = this.summary.kind === "direct";
    this.label = this.summary.title || this.conv;
    this.heading.textContent = this.label;
    this.back.textContent = `Back to ${this.label}`;
    this.drawControls();
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
