// The members screen (/c/{id}/members): who is in a conversation, add a
// member (POST /api/convs/{id}/members {user}), remove one
// (DELETE /api/convs/{id}/members/{user}: the owner, an admin, or the user
// themself) and leave (the same DELETE with one's own id).
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
  const conv = params.id;
  const me = ctx.me && ctx.me.user ? ctx.me.user.id : "";
  // The kind and title come from the core's list, which may still be
  // loading when the page was opened at this path: until then the screen
  // names the conversation by id and shows no controls.
  let summary = findConv(ctx, conv);
  let direct = !!summary && summary.kind === "direct";
  let label = summary && summary.title ? summary.title : conv;
  let last = null; // the last list read

  const status = statusLine();
  const list = h("ul", { class: "m-list", "data-test": "member-list", "aria-label": "Members" });
  const note = h("p", { class: "m-hint", "data-test": "member-note" });
  const who = input({ type: "text", autocomplete: "off", autocapitalize: "none", spellcheck: "false", "data-test": "add-member-input" });
  const add = h("button", { type: "submit", "data-test": "add-member" }, "Add");
  const leaveBox = h("div", { class: "m-actions" });

  async function refresh() {
    try {
      const got = await readMembers(ctx.api, conv);
      draw(got);
      // A conversation the loaded list does not name (it changed since):
      // offer the group controls and let the server judge.
      const loaded = ctx.client && ctx.client.conversationsLoaded && ctx.client.conversationsLoaded();
      if (!summary && loaded && !controls.firstChild) drawControls();
    } catch (err) {
      clear(list);
      status.error(err);
    }
  }

  function draw(got) {
    last = got;
    clear(list);
    const ids = Array.from(got.members).sort();
    for (const id of ids) {
      const row = h("li", { class: "m-item", "data-test": `member-${id}` },
        h("span", { class: "m-name" }, id, id === me ? " (you)" : ""));
      if (!direct && id !== me) {
        row.append(button("Remove", (e) => remove(id, e.currentTarget), { "aria-label": `Remove ${id}`, "data-test": `remove-${id}` }));
      }
      list.append(row);
    }
    if (ids.length === 0) list.append(h("li", { class: "m-item m-hint" }, "No members seen in the history you can see."));
    list.setAttribute("data-loaded", "true");
    note.textContent = got.complete
      ? "Everyone currently in the conversation."
      : `This list may be incomplete: ${got.why}. The API offers no member list; adding or removing someone by id still works.`;
  }

  // remove takes id out (b is the button pressed); focus goes to the id
  // field, since the row pressed may be gone.
  async function remove(id, b) {
    status.show(`Removing ${id}…`);
    try {
      const r = await busy(b, ctx.api("DELETE", url.member(conv, id)));
      status.show(r.changed ? `${id} was removed.` : `${id} was not a member.`);
      await refresh();
      if (who.isConnected) who.focus();
    } catch (err) {
      status.error(err);
    }
  }

  // removeTyped removes the id typed in the field: the way to reach a
  // member the list could not show.
  function removeTyped(e) {
    const id = who.value.trim().toLowerCase();
    if (!id) {
      who.focus();
      return;
    }
    who.value = "";
    remove(id, e.currentTarget);
  }

  async function addMember(e) {
    e.preventDefault();
    const id = who.value.trim().toLowerCase();
    if (!id) {
      who.focus();
      return;
    }
    status.show(`Adding ${id}…`);
    try {
      const r = await busy(add, ctx.api("POST", url.members(conv), { user: id }));
      who.value = "";
      status.show(r.changed ? `${id} was added.` : `${id} is already a member.`);
      await refresh();
    } catch (err) {
      status.error(err);
    }
  }

  // Leaving asks once more in place (no window.confirm: it blocks and is
  // not styled for the page).
  function askLeave() {
    clear(leaveBox);
    const yes = button("Leave now", doLeave, { class: "m-danger", "data-test": "leave-confirm" });
    leaveBox.append(
      h("span", { class: "m-hint" }, `Leave “${label}”? You will no longer see new messages.`), " ",
      yes, " ",
      button("Cancel", () => { drawLeave(); }, { "data-test": "leave-cancel" }),
    );
    yes.focus();
  }

  async function doLeave(e) {
    status.show("Leaving…");
    try {
      await busy(e.currentTarget, ctx.api("DELETE", url.member(conv, me)));
    } catch (err) {
      status.error(err);
      return;
    }
    if (ctx.client && ctx.client.refreshConversations) ctx.client.refreshConversations();
    if (ctx.toast) ctx.toast(`You left ${label}.`);
    ctx.navigate("/");
  }

  function drawLeave() {
    clear(leaveBox);
    leaveBox.append(button("Leave conversation", askLeave, { class: "m-danger", "data-test": "leave" }));
  }

  const heading = h("span", {}, label);
  const back = h("a", { href: `/c/${encodeURIComponent(conv)}`, "data-test": "back-to-conv" }, `Back to ${label}`);
  const controls = h("div", { "data-test": "member-controls" });

  // drawControls shows what the kind allows: a direct conversation's
  // members never change.
  function drawControls() {
    clear(controls);
    if (direct) {
      controls.append(h("p", { class: "m-hint" }, "The members of a direct conversation cannot change."));
      return;
    }
    controls.append(
      h("h2", { class: "m-h2" }, "Add or remove a member"),
      h("form", { class: "m-form m-row", on: { submit: addMember } },
        field("User id", who, "There is no user directory: ask the person for their id."), add,
        button("Remove", removeTyped, { "data-test": "remove-typed" })),
      h("h2", { class: "m-h2" }, "Leave"),
      leaveBox,
    );
    drawLeave();
  }

  function named() {
    summary = findConv(ctx, conv);
    if (!summary) return false;
    direct = summary.kind === "direct";
    label = summary.title || conv;
    heading.textContent = label;
    back.textContent = `Back to ${label}`;
    drawControls();
    if (last) draw(last);
    return true;
  }

  const view = screen(["Members of ", heading], "members",
    h("p", { class: "m-sub" }, back),
    status.el,
    note, list, controls);
  if (summary) {
    drawControls();
  } else if (ctx.client && ctx.client.on) {
    const off = ctx.client.on("convs", () => {
      if (named()) off();
    });
    view.dispose = off;
  }
  refresh();
  return view;
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
