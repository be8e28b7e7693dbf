// dom.js owns building DOM elements from data. It promises that every
// string child becomes a text node: nothing given to h() is ever parsed as
// HTML, so a message body like `<img src=x onerror=…>` stays text. No module
// of the app uses innerHTML, insertAdjacentHTML or outerHTML with data.

/**
 * h builds an element.
 *
 * attrs: `class` (string or array), `id`, `aria-*`, `data-*`, any other
 * attribute (a string, a number or true; false/null/undefined omit it),
 * `on: {click: fn, …}` event listeners, `props: {value: …}` DOM properties.
 * children: strings and numbers become text nodes, nodes are appended,
 * arrays are flattened, null/undefined/false are skipped.
 *
 * @param {string} tag
 * @param {Object<string, *>} [attrs]
 * @param {...*} children
 * @returns {HTMLElement}
 */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "on") {
        for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
      } else if (k === "props") {
        for (const [p, pv] of Object.entries(v)) el[p] = pv;
      } else if (k === "class") {
        el.className = Array.isArray(v) ? v.filter(Boolean).join(" ") : String(v);
      } else {
        el.setAttribute(k, v === true ? "" : String(v));
      }
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

/**
 * clear removes every child of el.
 * @param {Node} el
 * @returns {Node} el
 */
export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}
