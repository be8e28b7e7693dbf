// views/composer.js owns the message box under a timeline: Enter sends,
// Shift+Enter starts a new line, and the 4,000-character limit (Unicode code
// points, as the server counts) is shown from 3,500 characters on, before it
// is hit; a longer text cannot be sent. Sending clears the box at once and
// hands the text to the client's outbox; if the outbox cannot keep it, the
// text comes back (unless the user typed anew) with a toast.

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
 * @returns {HTMLElement}
 */
export function renderComposer(ctx, conv) {
  const { h, client } = ctx;
  const count = h("span", { class: "count", id: "composer-count-" + conv, "aria-live": "polite", "data-test": "composer-count" }, "");
  const box = h("textarea", {
    rows: 2, "aria-label": "Message", placeholder: "Write a message", "data-test": "composer",
    "aria-describedby": "composer-count-" + conv,
    on: {
      input: update,
      keydown: (e) => {
        if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
          e.preventDefault();
          submit();
        }
      },
    },
  });
  const button = h("button", { type: "submit", class: "primary", "data-test": "send" }, "Send");
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
      await client.send(conv, body);
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
