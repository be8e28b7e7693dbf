// views/list.js owns the conversation list of the sidebar: title, last
// message preview, unread badge, mentions badge ("@N": messages that
// mention the user, unread), latest activity first. Whenever the client
// announces "convs" it updates each conversation's row in place (keyed by
// conversation id) and moves only rows whose position changed, so a row
// that has the keyboard focus keeps it while messages arrive. select()
// marks the open conversation. Users show by display name (names.js);
// the list draws again when names arrive.

import { filesNote } from "../bytes.js";
import { nameOf, onNames } from "../names.js";

/**
 * preview is the one-line text of a conversation's latest event.
 * @param {object} ev
 * @returns {string}
 */
export function preview(ev) {
  if (!ev) return "";
  switch (ev.kind) {
    case "message":
      return ev.recalled ? nameOf(ev.sender) + ": message recalled" : nameOf(ev.sender) + ": " + (ev.body || filesNote(ev.attachments)).slice(0, 200);
    case "recall":
      return nameOf(ev.sender) + " recalled a message";
    case "edit":
      return nameOf(ev.sender) + " edited a message";
    case "reaction":
      return ev.on ? nameOf(ev.sender) + " reacted " + ev.emoji : "";
    case "member_joined":
      return nameOf(ev.user) + " joined";
    case "member_left":
      return nameOf(ev.user) + " left";
  }
  return "";
}

/**
 * renderList builds the list; the element has select(convID|null).
 * @param {{h: Function, client: object}} ctx
 * @returns {HTMLElement}
 */
export function renderList(ctx) {
  const { h, client } = ctx;
  const ul = h("ul", { class: "convlist", "data-test": "convlist" });
  const empty = h("p", { class: "muted list-empty", "data-test": "convlist-empty" }, "Loading…");
  const el = h("nav", { "aria-label": "Conversation list" },
    h("div", { class: "list-head" }, h("h2", null, "Conversations")), ul, empty);
  let selected = null;
  /** @type {Map<string, {li: HTMLElement, a: HTMLElement, title: HTMLElement, badge: HTMLElement, preview: HTMLElement}>} */
  const rows = new Map();

  function row(id) {
    let r = rows.get(id);
    if (!r) {
      const title = h("span", { class: "title" });
      const badge = h("span", { class: "badge", "data-test": "unread" });
      const at = h("span", { class: "badge at", "data-test": "mentions" });
      const preview = h("span", { class: "preview" });
      const a = h("a", { href: "/c/" + encodeURIComponent(id), "data-nav": "", "data-test": "conv", "data-conv": id }, title, preview);
      r = { li: h("li", null, a), a, title, badge, at, preview };
      rows.set(id, r);
    }
    return r;
  }

  function draw() {
    const convs = client.conversations();
    const seen = new Set();
    convs.forEach((c, i) => {
      seen.add(c.conv);
      const r = row(c.conv);
      const n = c.unread || 0;
      const name = client.title(c);
      const m = c.mentions_unread || 0;
      r.title.textContent = name;
      r.preview.textContent = preview(c.last);
      r.a.setAttribute("aria-label", name + (n ? ", " + n + " unread" : "") + (m ? ", " + m + " mentioning you" : ""));
      r.at.textContent = "@" + m;
      if (m && !r.at.isConnected) r.a.insertBefore(r.at, r.preview);
      else if (!m && r.at.isConnected) r.at.remove();
      if (c.conv === selected) r.a.setAttribute("aria-current", "page");
      else r.a.removeAttribute("aria-current");
      if (n) {
        r.badge.textContent = c.unread_capped ? "1000+" : String(n);
        if (!r.badge.isConnected) r.a.insertBefore(r.badge, r.preview);
      } else if (r.badge.isConnected) {
        r.badge.remove();
      }
      if (ul.children[i] !== r.li) ul.insertBefore(r.li, ul.children[i] || null);
    });
    for (const [id, r] of rows) {
      if (!seen.has(id)) {
        r.li.remove();
        rows.delete(id);
      }
    }
    empty.textContent = convs.length ? "" : client.conversationsLoaded() ? "No conversations yet." : "Loading…";
    empty.classList.toggle("hidden", convs.length > 0);
  }

  client.on("convs", draw);
  onNames(draw);
  draw();
  el.select = (id) => {
    selected = id;
    draw();
  };
  return el;
}
