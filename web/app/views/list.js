// views/list.js owns the conversation list of the sidebar: an avatar (a
// direct conversation's other user; a group's title initials), title, last
// message preview, unread badge, mentions badge ("@N": messages that
// mention the user, unread), latest activity first. Whenever the client
// announces "convs" it updates each conversation's row in place (keyed by
// conversation id) and moves only rows whose position changed, so a row
// that has the keyboard focus keeps it while messages arrive. select()
// marks the open conversation; primary(true) makes the list's heading the
// screen's h1 (the list screen), primary(false) an h2. Users show by display
// name (names.js); the list draws again when names arrive. The badges and
// the avatar are hidden from assistive technology: each row says its counts
// in words in a visually hidden span.

import { filesNote } from "../bytes.js";
import { nameOf, onNames, avatarEl, titleAvatarEl, initials } from "../names.js";
import { t, number } from "../i18n.js";

/**
 * preview is the one-line text of a conversation's latest event.
 * @param {object} ev
 * @returns {string}
 */
export function preview(ev) {
  if (!ev) return "";
  switch (ev.kind) {
    case "message":
      return ev.recalled
        ? t("app.preview.recalled", { name: nameOf(ev.sender) })
        : t("app.preview.message", { name: nameOf(ev.sender), text: (ev.body || filesNote(ev.attachments)).slice(0, 200) });
    case "recall":
      return t("app.preview.recall", { name: nameOf(ev.sender) });
    case "edit":
      return t("app.preview.edit", { name: nameOf(ev.sender) });
    case "reaction":
      return ev.on ? t("app.preview.reaction", { name: nameOf(ev.sender), emoji: ev.emoji }) : "";
    case "member_joined":
      return t("app.preview.joined", { name: nameOf(ev.user) });
    case "member_left":
      return t("app.preview.left", { name: nameOf(ev.user) });
  }
  return "";
}

/**
 * directPeer returns the other user of a direct conversation ("dm:a:b"),
 * or "" for a group.
 * @param {string} conv
 * @param {string} me
 * @returns {string}
 */
export function directPeer(conv, me) {
  const m = /^dm:([^:]+):([^:]+)$/.exec(conv);
  return m ? (m[1] === me ? m[2] : m[1]) : "";
}

/**
 * renderList builds the list; the element has select(convID|null) and primary(bool).
 * @param {{h: Function, client: object}} ctx
 * @returns {HTMLElement}
 */
export function renderList(ctx) {
  const { h, client } = ctx;
  const ul = h("ul", { class: "convlist", "data-test": "convlist" });
  const empty = h("p", { class: "muted list-empty", "data-test": "convlist-empty" }, t("app.loading"));
  const heading = () => h(primary ? "h1" : "h2", { id: "list-title", "data-test": "list-title" }, t("app.conversations"));
  let primary = false;
  let head = heading();
  const el = h("nav", { "aria-labelledby": "list-title" },
    h("div", { class: "list-head" }, head), ul, empty);
  let selected = null;
  /** @type {Map<string, {li: HTMLElement, a: HTMLElement, avatar: HTMLElement, title: HTMLElement, badges: HTMLElement, badge: HTMLElement, at: HTMLElement, preview: HTMLElement}>} */
  const rows = new Map();

  function row(c) {
    let r = rows.get(c.conv);
    if (!r) {
      const peer = directPeer(c.conv, client.user);
      const avatar = peer ? avatarEl(h, peer) : titleAvatarEl(h, client.title(c), c.conv);
      const title = h("span", { class: "title" });
      const badge = h("span", { class: "badge", "data-test": "unread", "aria-hidden": "true" });
      const at = h("span", { class: "badge at", "data-test": "mentions", "aria-hidden": "true" });
      const badges = h("span", { class: "badges" });
      const preview = h("span", { class: "preview" });
      // The counts as words for assistive technology (the badges are hidden from it).
      const counts = h("span", { class: "visually-hidden", "data-test": "conv-counts" });
      const a = h("a", { href: "/c/" + encodeURIComponent(c.conv), "data-nav": "", "data-test": "conv", "data-conv": c.conv }, avatar, title, counts, badges, preview);
      r = { li: h("li", null, a), a, avatar, peer, title, counts, badges, badge, at, preview };
      rows.set(c.conv, r);
    }
    return r;
  }

  function draw() {
    const convs = client.conversations();
    const seen = new Set();
    convs.forEach((c, i) => {
      seen.add(c.conv);
      const r = row(c);
      const n = c.unread || 0;
      const name = client.title(c);
      const m = c.mentions_unread || 0;
      const text = preview(c.last);
      r.title.textContent = name;
      r.preview.textContent = text;
      if (!r.peer) r.avatar.textContent = initials(name);
      const unread = c.unread_capped ? t("app.unreadMany", { n: number(1000) }) : t("app.unread", { n });
      const said = [n ? unread : "", m ? t("app.mentions", { n: m }) : ""].filter(Boolean);
      const sep = t("app.rowSep");
      r.counts.textContent = said.length ? sep + said.join(sep) + sep : " ";
      r.at.textContent = "@" + m;
      r.at.title = t("app.mentions", { n: m });
      if (m && !r.at.isConnected) r.badges.append(r.at);
      else if (!m && r.at.isConnected) r.at.remove();
      if (c.conv === selected) r.a.setAttribute("aria-current", "page");
      else r.a.removeAttribute("aria-current");
      if (n) {
        r.badge.textContent = c.unread_capped ? number(1000) + "+" : String(n);
        r.badge.title = unread;
        if (!r.badge.isConnected) r.badges.prepend(r.badge);
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
    empty.textContent = convs.length ? "" : client.conversationsLoaded() ? t("app.noConversations") : t("app.loading");
    empty.classList.toggle("hidden", convs.length > 0);
  }

  client.on("convs", draw);
  onNames(draw);
  draw();
  el.select = (id) => {
    selected = id;
    draw();
  };
  el.primary = (on) => {
    if (on === primary) return;
    primary = on;
    const next = heading();
    head.replaceWith(next);
    head = next;
  };
  return el;
}
