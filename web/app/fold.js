// fold.js applies the protocol's client rule for derived state
// (docs/protocol.md): a message read with derived state carries as_of; a
// pushed one has none and counts as read as of its own seq. An event folds
// into the message it names only when its seq is after that as_of, so
// nothing the server already counted is counted twice:
//   - edit: also only after the newest edit applied (edit_seq): the body,
//     edit_seq and edited_at change;
//   - reaction: the latest on/off per (user, emoji) after as_of changes the
//     count by the difference to the state before it (an event is always a
//     change: the server writes none for the state already held); `me`
//     follows the user's own;
//   - a reply (reply_to = R) adds one to R's replies and moves
//     last_reply_seq; a recall of a reply counted so takes it back;
//   - a recall blanks the message and its edits.

/** asOf is the head a message's derived state was read at. */
export function asOf(m) {
  return m.as_of || m.seq;
}

/**
 * mentionsOf returns the user ids an event mentions (a list on the wire;
 * space-separated text is accepted too).
 * @param {object} ev
 * @returns {string[]}
 */
export function mentionsOf(ev) {
  const m = ev && ev.mentions;
  if (!m) return [];
  return Array.isArray(m) ? m : String(m).split(" ").filter(Boolean);
}

/**
 * fold applies ev (just added to events, a Map seq → event) to the
 * messages of events it names; it returns the messages that changed.
 * @param {Map<number, object>} events
 * @param {object} ev
 * @param {string} me the signed-in user
 * @returns {object[]}
 */
export function fold(events, ev, me) {
  const msg = events.get(ev.kind === "message" ? ev.reply_to : ev.target);
  if (!msg || msg.kind !== "message") return [];
  switch (ev.kind) {
    case "edit":
      if (msg.recalled || ev.recalled || ev.seq <= asOf(msg) || ev.seq <= (msg.edit_seq || 0)) return [];
      msg.body = ev.body;
      msg.edit_seq = ev.seq;
      msg.edited_at = ev.at;
      return [msg];
    case "reaction":
      if (msg.recalled || ev.seq <= asOf(msg)) return [];
      react(msg, ev, me);
      return [msg];
    case "message":
      if (ev.seq <= asOf(msg)) return [];
      msg.replies = (msg.replies || 0) + 1;
      msg.last_reply_seq = Math.max(msg.last_reply_seq || 0, ev.seq);
      ev.counted = true;
      return [msg];
    case "recall": {
      const out = [];
      if (!msg.recalled) {
        msg.recalled = true;
        msg.body = "";
        msg.reactions = undefined;
        out.push(msg);
      }
      const root = msg.reply_to && events.get(msg.reply_to);
      if (root && (msg.counted || msg.seq <= asOf(root)) && ev.seq > asOf(root) && root.replies > 0) {
        root.replies--;
        out.push(root);
      }
      return out;
    }
  }
  return [];
}

function react(msg, ev, me) {
  if (!msg.rx) msg.rx = new Map(); // "user emoji" → {before, on}
  const key = ev.sender + " " + ev.emoji;
  const k = msg.rx.get(key) || { before: !ev.on };
  const was = k.on === undefined ? k.before : k.on;
  k.on = !!ev.on;
  msg.rx.set(key, k);
  const d = (k.on ? 1 : 0) - (was ? 1 : 0);
  const list = (msg.reactions || []).map((r) => ({ ...r }));
  let r = list.find((x) => x.emoji === ev.emoji);
  if (!r) {
    r = { emoji: ev.emoji, count: 0, me: false };
    list.push(r);
  }
  r.count = Math.max(0, r.count + d);
  if (ev.sender === me) r.me = k.on;
  msg.reactions = list.filter((x) => x.count > 0);
}
