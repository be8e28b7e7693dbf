// id.js owns the page's random ids: every id the page makes (a message's
// cmid, a recall's key, the device and install ids, a new conversation's
// id, an export's Idempotency-Key) comes from newID, so there is one source
// of randomness to trust.

/**
 * newID returns a random (version 4) UUID: crypto.randomUUID where the page
 * is a secure context, else the same format from crypto.getRandomValues
 * (which plain HTTP to another host still has). Where an id must be bare
 * hex (32 digits), callers drop the dashes.
 * @returns {string}
 */
export function newID() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const x = [...b].map((v) => v.toString(16).padStart(2, "0")).join("");
  return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20)}`;
}
