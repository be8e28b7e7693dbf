// views/extras.js holds the chat screens used only on demand, loaded when
// first used (a dynamic import) so they cost nothing on the first load:
// the reaction picker, the message editor, the version history, the
// thread panel, the @ autocomplete of the composer and the "New direct
// message" screen. Every user text is rendered as text (dom.js).

import { h, clear } from "../dom.js";
import { nameOf, avatarEl } from "../names.js";
import { t, when, number } from "../i18n.js";
import { formatBody } from "../format.js";
import { renderComposer, charCount, MAX_CHARS, why } from "./composer.js";
import { readMembers } from "./members.js";

/** The picker's common emoji; any other can be typed. */
export const COMMON = ["👍", "❤️", "😂", "🎉", "😮", "😢", "🙏", "👀"];

let openPop = null; // the one open popover: {el, close}

function popover(el, anchor) {
  closePopover();
  const onKey = (e) => {
    if (e.key === "Escape") closePopover();
  };
  const onDown = (e) => {
    if (!el.contains(e.target) && e.target !== anchor) closePopover();
  };
  document.addEventListener("keydown", onKey);
  document.addEventListener("mousedown", onDown);
  openPop = {
    el,
    close: () => {
      document.removeEventListener("keydown", onKey);
      document.removeEventListener("mousedown", onDown);
      el.remove();
    },
  };
  anchor.closest(".msg").appendChild(el);
}

function closePopover() {
  if (openPop) openPop.close();
  openPop = null;
}

/**
 * openPicker shows the reaction picker under a message: a click on an
 * emoji toggles the user's reaction, the field takes any other.
 * @param {object} view the TimelineView
 * @param {object} ev the message
 * @param {HTMLElement} anchor the React button
 */
export function openPicker(view, ev, anchor) {
  const mine = (emoji) => {
    const p = view.client.pending(view.conv, ev.seq).reactions;
    if (p.has(emoji)) return p.get(emoji);
    return (ev.reactions || []).some((r) => r.emoji === emoji && r.me);
  };
  const pick = (emoji) => {
    closePopover();
    view.toggle(ev, emoji, !mine(emoji));
  };
  const input = h("input", { type: "text", maxlength: 64, "aria-label": t("chat.otherEmoji"), placeholder: t("chat.otherPlaceholder"), "data-test": "pick-input", size: 6 });
  const el = h("form", {
    class: "picker", role: "dialog", "aria-label": t("chat.react"), "data-test": "picker",
    on: {
      submit: (e) => {
        e.preventDefault();
        const v = input.value.trim();
        if (v && !/\s/.test(v) && charCount(v) <= 64) pick(v);
      },
    },
  },
  COMMON.map((emoji) => h("button", {
    type: "button", class: ["pick", mine(emoji) && "me"], "data-test": "pick", "data-emoji": emoji,
    "aria-pressed": mine(emoji) ? "true" : "false", on: { click: () => pick(emoji) },
  }, emoji)),
  input, h("button", { type: "submit", "data-test": "pick-add" }, t("chat.add")));
  popover(el, anchor);
  el.querySelector("button").focus();
}

/**
 * openEditor puts an editor in place of one of the user's messages; Save
 * writes the edit to the outbox (it is sent once, also after being offline).
 * @param {object} view
 * @param {object} ev
 */
export function openEditor(view, ev) {
  const li = view.nodes.get(ev.seq);
  const body = li && li.querySelector("[data-test=body]");
  if (!body) return;
  const pend = view.client.pending(view.conv, ev.seq).body;
  const box = h("textarea", { rows: 3, "aria-label": t("chat.editBox"), "data-test": "edit-box" });
  box.value = pend !== null ? pend : ev.body;
  const done = () => {
    view.editing = 0;
    const cur = view.client.timeline(view.conv).events.get(ev.seq) || ev;
    view.update(cur);
  };
  const save = async () => {
    const text = box.value;
    if (text.trim() === "" || charCount(text) > MAX_CHARS) return view.ctx.toast(t("chat.editLength", { max: number(MAX_CHARS) }));
    done();
    if (text === ev.body && pend === null) return;
    try {
      await view.client.edit(view.conv, ev.seq, text);
    } catch (e) {
      view.ctx.toast(t("chat.editNotKept", { reason: why(e) }));
    }
  };
  box.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      save();
    } else if (e.key === "Escape") done();
  });
  view.editing = ev.seq;
  body.replaceWith(h("div", { class: "editor" }, box,
    h("button", { type: "button", class: "primary", "data-test": "edit-save", on: { click: save } }, t("chat.save")),
    h("button", { type: "button", "data-test": "edit-cancel", on: { click: done } }, t("chat.cancel"))));
  box.focus();
}

/**
 * showVersions shows a message's versions, the original first.
 * @param {object} view
 * @param {object} ev
 */
export async function showVersions(view, ev) {
  const list = h("ol", { class: "versions", "data-test": "versions" }, h("li", { class: "muted" }, t("chat.loading")));
  const dlg = h("dialog", { class: "versions-dialog", "aria-label": t("chat.versionsLabel") },
    h("h2", null, t("chat.versions")), list,
    h("form", { method: "dialog" }, h("button", { type: "submit", "data-test": "versions-close" }, t("chat.close"))));
  dlg.addEventListener("close", () => dlg.remove());
  document.body.appendChild(dlg);
  dlg.showModal();
  try {
    const r = await view.client.versions(view.conv, ev.seq);
    const vs = r.versions || [];
    list.replaceChildren(...(r.recalled ? [h("li", { class: "muted" }, t("chat.versionsRecalled"))] : vs.map((v, i) => h("li", { "data-test": "version", "data-seq": v.seq },
      h("div", { class: "muted" }, i === 0 ? t("chat.original", { at: when(v.at, "datetime") }) : t("chat.editedAt", { at: when(v.at, "datetime") })),
      h("div", { class: "body" }, formatBody(v.body, view.me))))));
  } catch (e) {
    list.replaceChildren(h("li", { class: "error" }, t("chat.versionsFailed", { reason: why(e) })));
  }
}

/**
 * openThread shows the thread panel of root beside the timeline: the root,
 * its replies (kept live by the client) and a composer that replies there.
 * @param {object} view
 * @param {number} root
 */
export function openThread(view, root) {
  if (view.thread) view.thread.close();
  const { client, conv } = view;
  const list = h("ol", { class: "events", "data-test": "thread-events" });
  const status = h("p", { class: "muted", role: "status" }, t("chat.loading"));
  const composer = renderComposer(view.ctx, conv, root, (box, upd) => autocomplete(view.ctx, conv, box, upd));
  const close = () => {
    off();
    client.closeThread();
    panel.remove();
    view.el.classList.remove("with-thread");
    view.thread = null;
  };
  const panel = h("aside", { class: "thread", "aria-label": t("chat.thread"), "data-test": "thread", "data-root": root },
    h("div", { class: "conv-head" }, h("h3", null, t("chat.thread")),
      h("button", { type: "button", class: "link", "data-test": "thread-close", on: { click: close } }, t("chat.close"))),
    h("div", { class: "thread-scroll" }, status, list), composer);
  const draw = (th) => {
    if (th !== client.th) return;
    const evs = [...th.events.values()].filter((e) => e.kind === "message").sort((a, b) => a.seq - b.seq);
    list.replaceChildren(...evs.map((e) => view.renderMsg(e, true)));
    status.textContent = th.state === "ready" || evs.length ? "" : th.error ? t("chat.threadFailed", { reason: why(th.error) }) : t("chat.loading");
  };
  const off = client.on("thread", draw);
  view.thread = { close };
  view.el.appendChild(panel);
  view.el.classList.add("with-thread");
  draw(client.openThread(conv, root));
  composer.focusBox();
}

const memberCache = new Map(); // conv → Promise<string[]>
let closeSuggest = null; // closes the open suggestion list

function members(ctx, conv) {
  if (!memberCache.has(conv)) {
    const p = readMembers(ctx.api, conv).then((r) => [...r.members].sort(), () => []);
    memberCache.set(conv, p);
    setTimeout(() => memberCache.delete(conv), 60 * 1000);
  }
  return memberCache.get(conv);
}

/**
 * autocomplete offers the conversation's members matching the @word
 * before the caret; a click, Enter or Tab puts "@id " in its place.
 * @param {object} ctx
 * @param {string} conv
 * @param {HTMLTextAreaElement} box
 * @param {Function} changed the composer's update
 */
export async function autocomplete(ctx, conv, box, changed) {
  const all = await members(ctx, conv);
  if (closeSuggest) closeSuggest();
  const before = box.value.slice(0, box.selectionStart);
  const m = /(^|[^\p{L}\p{N}._@-])@([A-Za-z0-9._-]*)$/u.exec(before);
  if (!m || !box.isConnected) return;
  const prefix = m[2].toLowerCase();
  const users = all.filter((u) => u !== ctx.client.user && u.startsWith(prefix)).slice(0, 8);
  if (!users.length) return;
  let active = 0;
  const choose = (u) => {
    const start = before.length - m[2].length - 1;
    box.value = box.value.slice(0, start) + "@" + u + " " + box.value.slice(before.length);
    box.selectionStart = box.selectionEnd = start + u.length + 2;
    finish();
    changed();
    box.focus();
  };
  const opts = users.map((u, i) => h("li", {
    role: "option", id: "suggest-" + i, "data-test": "mention-option", "data-user": u, "aria-selected": i === 0 ? "true" : "false",
    on: { mousedown: (e) => { e.preventDefault(); choose(u); } },
  }, avatarEl(h, u), "@" + u, nameOf(u) !== u ? h("span", { class: "muted" }, " " + nameOf(u)) : null));
  const ul = h("ul", { class: "suggest", role: "listbox", "aria-label": t("chat.members"), "data-test": "mention-suggest" }, opts);
  const onKey = (e) => {
    if (e.key === "ArrowDown" || e.key === "ArrowUp") {
      e.preventDefault();
      active = (active + (e.key === "ArrowDown" ? 1 : opts.length - 1)) % opts.length;
      opts.forEach((o, i) => o.setAttribute("aria-selected", i === active ? "true" : "false"));
    } else if (e.key === "Enter" || e.key === "Tab") {
      e.preventDefault();
      e.stopImmediatePropagation();
      choose(users[active]);
    } else if (e.key === "Escape") finish();
  };
  const finish = () => {
    closeSuggest = null;
    ul.remove();
    delete box.dataset.suggesting;
    box.removeEventListener("keydown", onKey, true);
    box.removeEventListener("blur", finish);
  };
  box.addEventListener("keydown", onKey, true);
  box.addEventListener("blur", finish);
  box.dataset.suggesting = "1";
  closeSuggest = finish;
  box.parentNode.appendChild(ul);
}

/**
 * renderNewDM is the "New direct message" screen: search the directory,
 * pick a user, and the direct conversation with them opens.
 * @param {object} ctx
 * @returns {HTMLElement}
 */
export function renderNewDM(ctx) {
  const { client } = ctx;
  const input = h("input", { type: "search", id: "dm-q", "aria-label": t("chat.findUser"), placeholder: t("chat.findUserPlaceholder"), "data-test": "dm-search", autocomplete: "off" });
  const list = h("ul", { class: "dm-results", "data-test": "dm-results" });
  const status = h("p", { class: "muted", role: "status", "data-test": "dm-status" });
  let seq = 0;
  let timer = 0;
  const search = async () => {
    const mine = ++seq;
    try {
      const r = await client.searchUsers(input.value.trim());
      if (mine !== seq) return;
      const users = (r.users || []).filter((u) => u.id !== client.user);
      clear(list);
      for (const u of users) {
        list.appendChild(h("li", null, h("button", { type: "button", class: "link", "data-test": "dm-user", "data-user": u.id, on: { click: () => open(u.id) } },
          avatarEl(h, u.id), u.display_name ? t("chat.userWithId", { name: u.display_name, id: u.id }) : u.id)));
      }
      status.textContent = users.length ? "" : t("chat.nobody");
    } catch (e) {
      if (mine === seq) status.textContent = t("chat.dmSearchFailed", { reason: why(e) });
    }
  };
  const open = async (user) => {
    status.textContent = t("chat.opening");
    try {
      const id = await client.openDirect(user);
      ctx.navigate("/c/" + encodeURIComponent(id));
    } catch (e) {
      status.textContent = t("chat.dmOpenFailed", { reason: why(e) });
    }
  };
  input.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(search, 200);
  });
  const el = h("section", { class: "screen", "aria-labelledby": "dm-title", "data-test": "new-dm" },
    h("h2", { id: "dm-title" }, t("chat.newDM")), input, status, list);
  queueMicrotask(() => {
    input.focus();
    search();
  });
  return el;
}
