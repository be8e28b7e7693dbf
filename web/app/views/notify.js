// views/notify.js owns the page's desktop notifications (loaded with
// live.js, after the session started; the top bar's "Allow notifications"
// button is app.js's): one notification for each message from someone
// else that arrives while the page is hidden, once the user allowed them;
// a message (or an edit) that mentions the user notifies also while the
// page shows another conversation, titled as a mention. Clicking a
// notification brings the page forward and opens its conversation.

import { filesNote } from "../bytes.js";
import { nameOf } from "../names.js";
import { t } from "../i18n.js";

/**
 * notifyArrivals raises a notification for every message the client
 * announces ("arrived") from someone else while the page is hidden.
 * @param {object} client the Client (store.js)
 * @param {function(string): void} open shows a conversation, by id
 * @returns {function(): void} stops it
 */
export function notifyArrivals(client, open) {
  return client.on("arrived", (c, ev) => {
    const mention = client.mentionsMe(ev);
    if ((ev.kind !== "message" && !mention) || ev.sender === client.user) return;
    const elsewhere = mention && location.pathname !== "/c/" + encodeURIComponent(c.conv);
    if (!(document.hidden || elsewhere) || typeof Notification === "undefined" || Notification.permission !== "granted") return;
    try {
      const title = mention ? t("app.notify.mentioned", { name: nameOf(ev.sender), conv: client.title(c) }) : client.title(c);
      const body = t("app.preview.message", { name: nameOf(ev.sender), text: ev.body || filesNote(ev.attachments) });
      const n = new Notification(title, { body, tag: "parley-" + c.conv });
      n.onclick = () => {
        window.focus();
        open(c.conv);
      };
    } catch {
      // Some browsers allow notifications only from a service worker.
    }
  });
}
