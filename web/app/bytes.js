// bytes.js owns how the page writes a number of bytes for people, the same
// in a composer's chip, a message's file and an upload's refusal.

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
  return (i === 0 ? String(v) : v.toFixed(v < 100 ? 1 : 0)) + " " + units[i];
}
