// views/composer.js owns the message box under a timeline: Enter sends,
// Shift+Enter starts a new line, and the 4,000-character limit (Unicode code
// points, as the server counts) is shown from 3,500 characters on, before it
// is hit; a longer text cannot be sent. Sending clears the box at once and
// hands the text to the client's outbox; if the outbox cannot keep it, the
// text comes back (unless the user typed anew) with a toast. Typing "@"
// calls suggest (the @ autocomplete of extras.js). A composer
// with replyTo sends replies to that thread.
//
// Files: "Attach" (a file input, several at once), files dropped on the
// composer (or on the timeline: attachFiles) and files pasted into the box
// go into the client's draft (kept in IndexedDB and uploaded at once); a
// chip per file shows its name, size and upload progress, or why it was
// refused, with "Remove". A message may then be sent with no text.

import { humanSize } from "../bytes.js";
import { t, number, errorText } from "../i18n.js";

/** why is the sentence for a failure: the error code's, else the error's own message. */
export function why(e) {
  if (e && e.sentence) return e.sentence;
  return e && typeof e.code === "string" && e.code ? errorText(e) : (e && e.message) || errorText("");
}

/** The server's limit on a message body, in code points. */
export const MAX_CHARS = 4000;
const SHOW_FROM = 3500;

/**
 * charCount counts code points, as the server does.
 * @param {string} s
 * @returns {number}
 */
export function charCount(s) {
  let n = 0;
  for (const _ of s) n++;
  return n;
}

/**
 * renderComposer builds the composer; the element has setText(text) and focusBox().
 * @param {{h: Function, client: object, toast: Function}} ctx
 * @param {string} conv
 * @param {number} [replyTo] the thread's root: replies go there
 * @param {function(HTMLTextAreaElement, Function): void} [suggest] called when an @word is being typed (with the box and update)
 * @returns {HTMLElement}
 */
export function renderComposer(ctx, conv, replyTo, suggest) {
  const { h, client } = ctx;
  const testId = (name) => (replyTo ? "thread-" : "") + name;
  const cid = "composer-count-" + conv + (replyTo ? "-" + replyTo : "");
  const count = h("span", { class: "count", id: cid, "aria-live": "polite", "data-test": "composer-count" }, "");
  const box = h("textarea", {
    rows: 2, "aria-label": replyTo ? t("chat.reply") : t("chat.message"), placeholder: replyTo ? t("chat.replyPlaceholder") : t("chat.messagePlaceholder"), "data-test": replyTo ? "thread-composer" : "composer",
    "aria-describedby": cid, "data-reply-to": replyTo || false,
    on: {
      input: () => {
        update();
        const before = box.value.slice(0, box.selectionStart);
        if (suggest && (box.dataset.suggesting || /(^|[^\p{L}\p{N}._@-])@[A-Za-z0-9._-]*$/u.test(before))) suggest(box, update);
      },
      keydown: (e) => {
        if (e.key === "Enter" && !e.shiftKey && !e.isComposing && !box.dataset.suggesting) {
          e.preventDefault();
          submit();
        }
      },
      paste: (e) => {
        const dt = e.clipboardData;
        if (!dt || !dt.files || !dt.files.length || dt.types.includes("text/plain")) return;
        e.preventDefault();
        attachFiles(dt.files);
      },
    },
  });
  const picker = h("input", {
    type: "file", multiple: true, class: "visually-hidden", tabindex: "-1", "aria-hidden": "true", "data-test": testId("attach-input"),
    on: { change: () => { attachFiles(picker.files); picker.value = ""; } },
  });
  const attachBtn = h("button", { type: "button", "data-test": testId("attach"), title: t("chat.attachTitle"), on: { click: () => picker.click() } }, t("chat.attach"));
  const chips = h("ul", { class: "chips", "aria-label": t("chat.attached"), "data-test": testId("chips") });
  const button = h("button", { type: "submit", class: "primary", "data-test": replyTo ? "thread-send" : "send" }, t("chat.send"));
  const form = h("form", {
    class: "composer", "aria-label": t("chat.sendMessage"),
    on: {
      submit: (e) => { e.preventDefault(); submit(); },
      dragover: (e) => dragOver(e, form),
      dragleave: () => form.classList.remove("dropping"),
      drop: (e) => drop(e, form, attachFiles),
    },
  }, chips, box, h("div", { class: "composer-side" }, button, attachBtn, picker, h("div", null, count)));

  function draft() {
    return client.draft(conv, replyTo);
  }

  function attachFiles(list) {
    const files = [...(list || [])];
    if (!files.length) return;
    client.attach(conv, replyTo || 0, files).catch((e) => ctx.toast(t("chat.filesNotKept", { reason: why(e) })));
  }

  function drawChips() {
    const d = draft();
    chips.replaceChildren(...((d && d.files) || []).map((f) => fileChip(h, client, f, () => client.detach(d.cmid, f.key))));
  }

  const offs = [
    client.on("draft", (c) => c === conv && drawChips()),
    client.on("upload", (p) => showProgress(chips, p)),
  ];
  // The composer has no owner that disposes it: it lets go once it left the page.
  const alive = () => {
    if (form.isConnected) form.seen = true;
    else if (form.seen) for (const off of offs) off();
    return form.isConnected;
  };
  for (const name of ["draft", "upload"]) offs.push(client.on(name, alive));
  drawChips();

  function update() {
    const n = charCount(box.value);
    const over = n > MAX_CHARS;
    const shown = { n: number(n), max: number(MAX_CHARS) };
    count.textContent = n < SHOW_FROM ? "" : over ? t("chat.countOver", shown) : t("chat.count", shown);
    count.classList.toggle("over", over);
    button.disabled = over;
    box.setAttribute("aria-invalid", over ? "true" : "false");
  }

  async function submit() {
    const body = box.value;
    const d = draft();
    const files = !!(d && d.files && d.files.length);
    if ((body.trim() === "" && !files) || charCount(body) > MAX_CHARS) return;
    if (files && d.files.some((f) => f.error)) {
      ctx.toast(t("chat.removeRefused"));
      return;
    }
    // Clear at once: what the user types while the outbox writes is the next message.
    box.value = "";
    update();
    try {
      await client.send(conv, body, replyTo);
    } catch (e) {
      if (box.value === "") box.value = body;
      update();
      ctx.toast(t("chat.messageNotKept", { reason: why(e) }));
    }
  }

  form.setText = (text) => {
    box.value = text;
    update();
    box.focus();
  };
  form.focusBox = () => box.focus();
  form.attachFiles = attachFiles;
  return form;
}

/**
 * fileChip shows one attached file: name, size, upload progress (or the
 * refusal), and Remove when onRemove is given.
 * @param {Function} h
 * @param {object} client
 * @param {{key: string, name: string, size: number, file?: object, error?: string}} f
 * @param {function(): void} [onRemove]
 * @returns {HTMLElement}
 */
export function fileChip(h, client, f, onRemove) {
  const p = client.progress.get(f.key);
  const done = !!f.file;
  const bar = h("progress", {
    max: f.size || 1, value: done ? f.size || 1 : p ? p.sent : 0, "data-test": "upload-progress",
    "aria-label": t("chat.uploadOf", { name: f.name }), class: done || f.error ? "hidden" : false,
  });
  return h("li", { class: ["chip", f.error && "refused"], "data-test": "chip", "data-key": f.key, "data-state": f.error ? "refused" : done ? "uploaded" : "uploading" },
    h("span", { class: "chip-name", "data-test": "chip-name" }, f.name),
    h("span", { class: "muted" }, " " + humanSize(f.size)),
    bar,
    f.error ? h("span", { class: "error", role: "alert", "data-test": "chip-error" }, f.error) : null,
    onRemove ? h("button", { type: "button", class: "link", "data-test": "chip-remove", "aria-label": t("chat.removeFile", { name: f.name }), on: { click: onRemove } }, t("chat.remove")) : null);
}

/** showProgress moves the bars of one file (in every chip of it on the page). */
export function showProgress(root, p) {
  for (const li of root.querySelectorAll(`[data-test=chip][data-key="${p.key}"]`)) {
    const bar = li.querySelector("progress");
    if (bar && li.dataset.state === "uploading") bar.value = p.sent;
  }
}

/** dragOver accepts a drag that carries files. */
export function dragOver(e, el) {
  if (!e.dataTransfer || ![...e.dataTransfer.types].includes("Files")) return;
  e.preventDefault();
  e.dataTransfer.dropEffect = "copy";
  el.classList.add("dropping");
}

/** drop attaches the dropped files. */
export function drop(e, el, attach) {
  el.classList.remove("dropping");
  // The composer inside the timeline's screen took it already.
  if (e.defaultPrevented || !e.dataTransfer || !e.dataTransfer.files || !e.dataTransfer.files.length) return;
  e.preventDefault();
  attach(e.dataTransfer.files);
}
