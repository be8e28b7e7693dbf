// bytes.js owns how the page writes files for people: a number of bytes,
// the same in a composer's chip, a message's file and an upload's refusal,
// and the line that stands for a message of files alone (the list's
// preview, a notification), in the page's language (i18n.js).

import { t, number } from "./i18n.js";

/**
 * humanSize writes a byte count in decimal units: "812 B", "48.2 KB", "312 MB".
 * @param {number} n
 * @returns {string}
 */
export function humanSize(n) {
  const units = ["B", "KB", "MB", "GB", "TB"];
  let v = n;
  let i = 0;
  while (v >= 1000 && i < units.length - 1) {
    v /= 1000;
    i++;
  }
  return number(i === 0 ? v : Number(v.toFixed(v < 100 ? 1 : 0))) + " " + units[i];
}

/**
 * filesNote stands for a message's files where its text would be: "boat.png", "3 files".
 * @param {Array<{name: string}>} [list] the event's attachments
 * @returns {string} "" without files
 */
export function filesNote(list) {
  if (!list || !list.length) return "";
  return "📎 " + (list.length === 1 ? list[0].name : t("chat.files", { n: list.length, count: number(list.length) }));
}
