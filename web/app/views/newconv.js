// The "new conversation" screen (/new): a direct conversation with one
// other person or a group with a title and members, created with
// POST /api/convs {id, kind, title, members}.
//
// People are added by their user id and shown, once added, with their
// display name and avatar; the server answers NOT_FOUND for an id that does
// not exist, shown as a sentence. Admins are not offered the admin user
// listing as suggestions here: every operations read is written to the
// audit log, and opening this screen should not be one.
//
// The conversation id is made here, once per screen, so a retry after an
// outage (whose outcome is unknown) cannot create a second conversation:
// the retry answers ALREADY_EXISTS for the one the first attempt made.

import { h, clear } from "../dom.js";
import { newID } from "../id.js";
import { url } from "../urls.js";
import { avatarEl, nameEl, nameOf } from "../names.js";
import { t } from "../i18n.js";
import { button, busy, field, input, screen, statusLine } from "./forms.js";

// USER_ID is the server's user id rule (parley.ValidUserID) checked before
// sending, so a typo is caught at once; the server checks again.
const USER_ID = /^[a-z0-9][a-z0-9._-]{0,31}$/;

// renderNewConv is the view of /new.
export function renderNewConv(ctx) {
  return new NewConvView(ctx).view;
}

// NewConvView is the /new screen while it is on the page.
class NewConvView {
  constructor(ctx) {
    this.ctx = ctx;
    this.me = ctx.me && ctx.me.user ? ctx.me.user.id : "";
    this.convID = `c-${newID().replaceAll("-", "")}`; // c- and 32 hex digits
    this.attempted = false; // an earlier attempt's outcome may be unknown
    this.members = []; // the other members, in the order added

    this.status = statusLine();
    const kindGroup = input({ type: "radio", name: "m-kind", value: "group", id: "m-kind-group", "data-test": "kind-group" });
    this.kindDirect = input({ type: "radio", name: "m-kind", value: "direct", id: "m-kind-direct", "data-test": "kind-direct" });
    kindGroup.checked = true;
    this.title = input({ type: "text", maxlength: "200", autocomplete: "off", "data-test": "conv-title" });
    this.who = input({
      type: "text", autocomplete: "off", autocapitalize: "none", spellcheck: "false",
      "data-test": "member-input",
    });
    this.chips = h("ul", { class: "m-chips", "aria-label": t("manage.newconv.chipsLabel"), "data-test": "member-chips" });
    this.create = h("button", { type: "submit", class: "m-primary", "data-test": "create-conv" }, t("manage.newconv.create"));
    this.titleField = field(t("manage.newconv.convTitle"), this.title, t("manage.newconv.convTitleHint"));

    const addButton = button(t("manage.newconv.add"), () => { this.addWho(); this.who.focus(); }, { "data-test": "member-add" });
    this.who.addEventListener("keydown", (e) => {
      if (e.key === "Enter") {
        e.preventDefault();
        this.addWho();
      }
    });
    kindGroup.addEventListener("change", () => this.syncKind());
    this.kindDirect.addEventListener("change", () => this.syncKind());

    const form = h("form", { class: "m-form", "aria-describedby": "m-newconv-help", on: { submit: (e) => this.submit(e) } },
      h("fieldset", { class: "m-kinds" },
        h("legend", {}, t("manage.newconv.kind")),
        h("label", { for: "m-kind-group" }, kindGroup, " " + t("manage.newconv.group")),
        h("label", { for: "m-kind-direct" }, this.kindDirect, " " + t("manage.newconv.direct"))),
      this.titleField,
      h("div", { class: "m-row" },
        field(t("manage.newconv.person"), this.who, t("manage.newconv.personHint")),
        addButton),
      this.chips,
      h("div", { class: "m-actions" }, this.create),
    );
    this.view = screen(t("manage.newconv.title"), "newconv",
      h("p", { id: "m-newconv-help", class: "m-hint" }, t("manage.newconv.help")),
      form, this.status.el);
  }

  isDirect() {
    return this.kindDirect.checked;
  }

  syncKind() {
    this.titleField.hidden = this.isDirect();
    if (this.isDirect() && this.members.length > 1) {
      this.status.show(t("manage.newconv.directExtra"));
    }
  }

  drawChips() {
    clear(this.chips);
    for (const id of this.members) {
      this.chips.append(
        h("li", { class: "m-chip", "data-test": `chip-${id}` }, avatarEl(h, id), nameEl(h, id), " ",
          button("×", () => {
            this.members.splice(this.members.indexOf(id), 1);
            this.drawChips();
            this.who.focus();
          }, { "aria-label": t("manage.newconv.unchip", { name: nameOf(id) }), class: "m-chip-x" })),
      );
    }
  }

  addWho() {
    const ids = this.who.value.split(/[\s,]+/).map((s) => s.trim().toLowerCase()).filter(Boolean);
    for (const id of ids) {
      if (!USER_ID.test(id)) {
        this.status.show(t("manage.newconv.badId", { id }));
        return false;
      }
      if (id === this.me) {
        this.status.show(t("manage.newconv.self"));
        continue;
      }
      if (!this.members.includes(id)) this.members.push(id);
    }
    this.who.value = "";
    this.status.clear();
    this.drawChips();
    return true;
  }

  // body is the create request, or null (and the reason shown) when the
  // form is not complete.
  body() {
    const kind = this.isDirect() ? "direct" : "group";
    if (kind === "direct" && this.members.length !== 1) {
      this.status.show(t("manage.newconv.directOne"));
      this.who.focus();
      return null;
    }
    if (kind === "group" && !this.title.value.trim()) {
      this.status.show(t("manage.newconv.needTitle"));
      this.title.focus();
      return null;
    }
    // A direct conversation's title names both people for the list.
    return {
      id: this.convID, kind, members: this.members.slice(),
      title: kind === "direct" ? [this.me, this.members[0]].sort().join(" & ") : this.title.value.trim(),
    };
  }

  async submit(e) {
    const ctx = this.ctx;
    e.preventDefault();
    if (this.who.value.trim() && !this.addWho()) return;
    const body = this.body();
    if (!body) return;
    this.status.show(t("manage.newconv.creating"));
    try {
      await busy(this.create, ctx.api("POST", url.convs(), body));
    } catch (err) {
      if (!(this.attempted && err.code === "ALREADY_EXISTS")) {
        this.attempted = this.attempted || err.code === "UNAVAILABLE" || err.status === 0;
        this.status.error(err, { NOT_FOUND: t("manage.newconv.noUser") });
        return;
      }
      // The earlier attempt did create it.
    }
    this.status.show(t("manage.newconv.created"));
    if (ctx.client && ctx.client.refreshConversations) ctx.client.refreshConversations();
    ctx.navigate(`/c/${encodeURIComponent(this.convID)}`);
  }
}
