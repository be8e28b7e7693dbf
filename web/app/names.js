// names.js owns the display names the page shows in place of user ids.
// Frames and events name users by id; this module looks each id up once
// (GET /api/users/{id}) and answers the display name, or the id itself
// while the lookup runs, when the user set none, or when the caller may not
// see them. A name is looked up again after maxAge, so a name someone
// changed reaches the other pages within minutes (at once after a reload).
//
// Two ways to show a name: nameOf(id) for text built once (a preview, a
// notification), with onNames(fn) to rebuild it when names arrive; and
// nameEl(h, id) for an element that updates itself in place; avatarEl(h, id)
// for the initials avatar beside a name, which follows the name too;
// titleAvatarEl(h, title, key) for a group's avatar (its title's initials).

import { api, RETRYABLE } from "./api.js";
import { url } from "./urls.js";

const maxAge = 5 * 60 * 1000;
/** @type {Map<string, {name: string, at: number}>} */
const known = new Map();
const pending = new Set();
const listeners = new Set();
let flush = 0;

/**
 * nameOf returns what to show for user id: the display name, else the id.
 * It starts a lookup when the name is unknown or old.
 * @param {string} id
 * @returns {string}
 */
export function nameOf(id) {
  if (!id) return "";
  const k = known.get(id);
  if (!k || Date.now() - k.at > maxAge) lookup(id);
  return (k && k.name) || id;
}

/**
 * nameEl returns a span showing nameOf(id) that follows later changes; the
 * id stays in its title and data-user attributes.
 * @param {Function} h dom.js h
 * @param {string} id
 * @param {object} [attrs] more attributes
 * @returns {HTMLElement}
 */
export function nameEl(h, id, attrs) {
  return h("span", Object.assign({ class: "uname", "data-name-of": id, title: id }, attrs || {}), nameOf(id));
}

/**
 * initials returns up to two letters standing for a name: the first
 * letters of its first two words ("Ana Lima" → "AL"), or its first
 * character when it is one word or written without spaces (Chinese).
 * @param {string} name
 * @returns {string}
 */
export function initials(name) {
  const words = String(name || "?").trim().split(/[\s._-]+/).filter(Boolean);
  const first = (w) => Array.from(w)[0] || "";
  if (words.length === 0) return "?";
  if (words.length === 1 || /[^\x00-\u024f]/.test(words[0])) return first(words[0]).toUpperCase();
  return (first(words[0]) + first(words[1])).toUpperCase();
}

/**
 * hue returns the avatar colour's hue (0–359) for a user id: the same id
 * has the same colour on every page and device.
 * @param {string} id
 * @returns {number}
 */
function hue(id) {
  let x = 2166136261;
  for (const c of String(id)) {
    x ^= c.codePointAt(0);
    x = Math.imul(x, 16777619);
  }
  return (x >>> 0) % 360;
}

/**
 * avatarEl returns a decorative (aria-hidden) circle with the initials of
 * the user's name on a colour derived from the id; it follows later name
 * changes as nameEl does.
 * @param {Function} h dom.js h
 * @param {string} id
 * @returns {HTMLElement}
 */
export function avatarEl(h, id) {
  const el = h("span", { class: "avatar", "aria-hidden": "true", "data-avatar-of": id }, initials(nameOf(id)));
  el.style.setProperty("--avatar-hue", String(hue(id)));
  return el;
}

/**
 * titleAvatarEl returns a decorative avatar for something that is not a
 * user (a group conversation): the initials of its title on a colour
 * derived from key (its id). The caller sets new initials when the title
 * changes.
 * @param {Function} h dom.js h
 * @param {string} title
 * @param {string} key
 * @returns {HTMLElement}
 */
export function titleAvatarEl(h, title, key) {
  const el = h("span", { class: "avatar avatar-group", "aria-hidden": "true" }, initials(title));
  el.style.setProperty("--avatar-hue", String(hue(key)));
  return el;
}

/**
 * setName records a name learnt elsewhere (the directory, the account
 * screen, /api/me); "" means none.
 * @param {string} id
 * @param {string} name
 */
export function setName(id, name) {
  if (!id) return;
  const prev = known.get(id);
  known.set(id, { name: name || "", at: Date.now() });
  if (!prev || prev.name !== (name || "")) changed(id);
}

/**
 * onNames calls fn (debounced) after names changed; it returns the
 * unsubscribe function.
 * @param {Function} fn
 * @returns {Function}
 */
export function onNames(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

function lookup(id) {
  if (pending.has(id)) return;
  pending.add(id);
  api("GET", url.user(id)).then((u) => {
    pending.delete(id);
    setName(id, (u && u.display_name) || "");
  }, (e) => {
    pending.delete(id);
    // Not found or not listable: the id is the name. A retryable failure
    // leaves it unknown, so the next use asks again.
    if (!RETRYABLE.has(e.code)) setName(id, "");
  });
}

function changed(id) {
  const show = nameOf(id);
  for (const el of document.querySelectorAll("[data-name-of]")) {
    if (el.getAttribute("data-name-of") === id) el.textContent = show;
  }
  for (const el of document.querySelectorAll("[data-avatar-of]")) {
    if (el.getAttribute("data-avatar-of") === id) el.textContent = initials(show);
  }
  if (flush) return;
  flush = setTimeout(() => {
    flush = 0;
    for (const fn of listeners) fn();
  }, 50);
}
