// The "new conversation" screen (/new): a direct conversation with one
// other person or a group with a title and members, created with
// POST /api/convs {id, kind, title, members}.
//
// People are named by their user id. The API has no user directory for
// non-admins (only GET /api/admin/users, for admins), so a user types the
// ids they were told; the server answers NOT_FOUND for an id that does not
// exist and that message is shown. Admins are not offered the admin user
// listing as suggestions here: every operations read is written to the
// audit log, and opening this screen should not be one.
//
// The conversation id is made here, once per screen, so a retry after an
// outage (whose outcome is unknown) cannot create a second conversation:
// the retry answers ALREADY_EXISTS for the one the first attempt made.

import { h, clear } from "../dom.js";
import { newID } from "../id.js";
import { url } from "../urls.js";
import { button, busy, field, input, screen, statusLine } from "./forms.js";

// USER_ID is the server's user id rule (parley.ValidUserID) checked before
// sending, so a typo is caught at once; the server checks again.
const USER_ID = /^[a-z0-9][a-z0-9._-]{0,31}$/;

// renderNewConv is the view of /new.
export function renderNewConv(ctx) {
  const me = ctx.me && ctx.me.user ? ctx.me.user.id : "";
  const convID = `c-${newID().replaceAll("-", "")}`; // c- and 32 hex digits
  let attempted = false; // an earlier attempt's outcome may be unknown
  const members = []; // the other members, in the order added

  const status = statusLine();
  const kindGroup = input({ type: "radio", name: "m-kind", value: "group", id: "m-kind-group", "data-test": "kind-group" });
  const kindDirect = input({ type: "radio", name: "m-kind", value: "direct", id: "m-kind-direct", "data-test": "kind-direct" });
  kindGroup.checked = true;
  const title = input({ type: "text", maxlength: "200", autocomplete: "off", "data-test": "conv-title" });
  const who = input({
    type: "text", autocomplete: "off", autocapitalize: "none", spellcheck: "false",
    "data-test": "member-input",
  });
  const chips = h("ul", { class: "m-chips", "aria-label": "Members to add", "data-test": "member-chips" });
  const create = h("button", { type: "submit", class: "m-primary", "data-test": "create-conv" }, "Create");

  const titleField = field("Title", title, "Shown to every member; up to 200 characters.");

  function isDirect() {
    return kindDirect.checked;
  }

  function syncKind() {
    titleField.hidden = isDirect();
    if (isDirect() && members.length > 1) {
      status.show("A direct conversation has exactly one other person: remove the extra ones.");
    }
  }

  function drawChips() {
    clear(chips);
    for (const id of members) {
      chips.append(
        h("li", { class: "m-chip", "data-test": `chip-${id}` }, id, " ",
          button("×", () => {
            members.splice(members.indexOf(id), 1);
            drawChips();
            who.focus();
          }, { "aria-label": `Remove ${id}`, class: "m-chip-x" })),
      );
    }
  }

  function addWho() {
    const ids = who.value.split(/[\s,]+/).map((s) => s.trim().toLowerCase()).filter(Boolean);
    for (const id of ids) {
      if (!USER_ID.test(id)) {
        status.show(`"${id}" is not a user id (lower-case letters, digits, . _ -, up to 32).`);
        return false;
      }
      if (id === me) {
        status.show("You are a member already.");
        continue;
      }
      if (!members.includes(id)) members.push(id);
    }
    who.value = "";
    status.clear();
    drawChips();
    return true;
  }

  const addButton = button("Add", () => { addWho(); who.focus(); }, { "data-test": "member-add" });
  who.addEventListener("keydown", (e) => {
    if (e.key === "Enter") {
      e.preventDefault();
      addWho();
    }
  });
  kindGroup.addEventListener("change", syncKind);
  kindDirect.addEventListener("change", syncKind);

  async function submit(e) {
    e.preventDefault();
    if (who.value.trim() && !addWho()) return;
    const kind = isDirect() ? "direct" : "group";
    if (kind === "direct" && members.length !== 1) {
      status.show("A direct conversation needs exactly one other person.");
      who.focus();
      return;
    }
    if (kind === "group" && !title.value.trim()) {
      status.show("A group needs a title.");
      title.focus();
      return;
    }
    // A direct conversation's title names both people for the list.
    const body = {
      id: convID, kind, members: members.slice(),
      title: kind === "direct" ? [me, members[0]].sort().join(" & ") : title.value.trim(),
    };
    status.show("Creating…");
    try {
      await busy(create, ctx.api("POST", url.convs(), body));
    } catch (err) {
      if (!(attempted && err.code === "ALREADY_EXISTS")) {
        attempted = attempted || err.code === "UNAVAILABLE" || err.status === 0;
        status.error(err);
        return;
      }
      // The earlier attempt did create it.
    }
    status.show("Created.");
    if (ctx.client && ctx.client.refreshConversations) ctx.client.refreshConversations();
    ctx.navigate(`/c/${encodeURIComponent(convID)}`);
  }

  const form = h("form", { class: "m-form", "aria-describedby": "m-newconv-help", on: { submit } },
    h("fieldset", { class: "m-kinds" },
      h("legend", {}, "Kind"),
      h("label", { for: "m-kind-group" }, kindGroup, " Group"),
      h("label", { for: "m-kind-direct" }, kindDirect, " Direct (one other person)")),
    titleField,
    h("div", { class: "m-row" },
      field("Add a person by user id", who,
        "There is no directory of users: ask people for their id (several may be separated by spaces)."),
      addButton),
    chips,
    h("div", { class: "m-actions" }, create),
  );

  const view = screen("New conversation", "newconv",
    h("p", { id: "m-newconv-help", class: "m-hint" }, "You are a member of what you create; a group's creator owns it."),
    form, status.el);

  return view;
}
