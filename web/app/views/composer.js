// views/composer.js owns the message box under a timeline: Enter sends,
// Shift+Enter starts a new line, and the 4,000-character limit (Unicode code
// points, as the server counts) is shown from 3,500 characters on, before it
// is hit; a longer text cannot be sent. Sending clears the box at once and
// hands the text to the client's outbox; if the outbox cannot keep it, the
// text comes back (unless the user typed anew) with a toast. Typing "@"
// calls suggest (the @ autocomplete of extras.js). A composer
// with replyTo sends replies to that thread.

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
  const cid = "composer-count-" + conv + (replyTo ? "-" + replyTo : "");
  const count = h("span", { class: "count", id: cid, "aria-live": "polite", "data-test": "composer-count" }, "");
  const box = h("textarea", {
    rows: 2, "aria-label": replyTo ? "Reply" : "Message", placeholder: replyTo ? "Reply in the thread" : "Write a message", "data-test": replyTo ? "thread-composer" : "composer",
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
    },
  });
  const button = h("button", { type: "submit", class: "primary", "data-test": replyTo ? "thread-send" : "send" }, "Send");
  const form = h("form", {
    class: "composer", "aria-label": "Send a message",
    on: { submit: (e) => { e.preventDefault(); submit(); } },
  }, box, h("div", { class: "composer-side" }, button, h("div", null, count)));

  function update() {
    const n = charCount(box.value);
    const over = n > MAX_CHARS;
    count.textContent = n >= SHOW_FROM ? n.toLocaleString("en") + " / " + MAX_CHARS.toLocaleString("en") + (over ? " — too long" : "") : "";
    count.classList.toggle("over", over);
    button.disabled = over;
    box.setAttribute("aria-invalid", over ? "true" : "false");
  }

  async function submit() {
    const body = box.value;
    if (body.trim() === "" || charCount(body) > MAX_CHARS) return;
    // Clear at once: what the user types while the outbox writes is the next message.
    box.value = "";
    update();
    try {
      await client.send(conv, body, replyTo);
    } catch (e) {
      if (box.value === "") box.value = body;
      update();
      ctx.toast("Could not keep the message: " + (e.detail || e.message || e.code));
    }
  }

  form.setText = (text) => {
    box.value = text;
    update();
    box.focus();
  };
  form.focusBox = () => box.focus();
  return form;
}
