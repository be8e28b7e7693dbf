// format.js owns how a message's text shows: built as DOM nodes (dom.js),
// never parsed as HTML, so markup in a body stays text. Fenced ``` blocks
// become <pre><code>, `code` <code>, **strong** <strong>, *emphasis* <em>,
// and http:, https: and mailto: URLs links that open in a new tab without
// the opener (rel="noopener noreferrer"); any other scheme (javascript:,
// data:) stays text. @mentions are spans, a mention of the user (or @all)
// marked. Nothing nests inside code; mentions show inside emphasis.

import { h } from "./dom.js";

const FENCE = /```(?:[^\n`]*\n)?([\s\S]*?)\n?```/g;
const INLINE = /`([^`\n]+)`|((?:https?:\/\/|mailto:)[^\s<>"]+)|(?<![\p{L}\p{N}*])\*\*(?=\S)([^*\n]*?\S)\*\*(?!\*)|(?<![\p{L}\p{N}*])\*([^\s*](?:[^*\n]*?[^\s*])?)\*(?![\p{L}\p{N}*])/giu;
const MENTION = /(^|[^\p{L}\p{N}._@-])@([A-Za-z0-9._-]+)/gu;
const SCHEMES = new Set(["http:", "https:", "mailto:"]);

/**
 * formatBody returns the nodes of a message's text.
 * @param {string} text
 * @param {string} me the signed-in user (their mentions are marked)
 * @returns {Array<string|Node>}
 */
export function formatBody(text, me) {
  const out = [];
  let last = 0;
  for (const m of String(text || "").matchAll(FENCE)) {
    out.push(...inline(text.slice(last, m.index), me));
    out.push(h("pre", null, h("code", null, m[1])));
    last = m.index + m[0].length;
    if (text[last] === "\n") last++; // the block ends its line
  }
  out.push(...inline(String(text || "").slice(last), me));
  return out;
}

function inline(text, me) {
  const out = [];
  let last = 0;
  for (const m of text.matchAll(INLINE)) {
    let node;
    let end = m.index + m[0].length;
    if (m[1] !== undefined) node = h("code", null, m[1]);
    else if (m[2] !== undefined) {
      const link = trim(m[2]);
      end = m.index + link.length;
      node = safe(link) ? h("a", { href: link, target: "_blank", rel: "noopener noreferrer" }, link) : link;
    } else if (m[3] !== undefined) node = h("strong", null, mentions(m[3], me));
    else node = h("em", null, mentions(m[4], me));
    out.push(...mentions(text.slice(last, m.index), me), node);
    last = end;
  }
  out.push(...mentions(text.slice(last), me));
  return out;
}

/** trim leaves out punctuation that ends a sentence after a URL, and a ")" it does not open. */
function trim(s) {
  for (;;) {
    const c = s[s.length - 1];
    if (".,;:!?'".includes(c) || (c === ")" && s.split("(").length <= s.split(")").length - 1)) s = s.slice(0, -1);
    else return s;
  }
}

function safe(link) {
  try {
    return SCHEMES.has(new URL(link).protocol);
  } catch {
    return false;
  }
}

/**
 * mentions renders a text with its @mentions in spans.
 * @param {string} text
 * @param {string} me
 * @returns {Array<string|HTMLElement>}
 */
export function mentions(text, me) {
  const out = [];
  let last = 0;
  for (const m of text.matchAll(MENTION)) {
    const at = m.index + m[1].length;
    const id = m[2].replace(/[._-]+$/, "").toLowerCase();
    if (!id) continue;
    out.push(text.slice(last, at));
    const mine = id === me || id === "all";
    out.push(h("span", { class: ["mention", mine && "mention-me"], "data-test": "mention" }, "@" + m[2].slice(0, id.length)));
    last = at + 1 + id.length;
  }
  out.push(text.slice(last));
  return out;
}
