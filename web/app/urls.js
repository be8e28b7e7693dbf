// urls.js builds every URL the page asks the server for: the HTTP API (the
// uploads' too: an upload's own URL is the Location the server answers) and
// the export API (routes in httpapi/routes.go, described in
// docs/protocol.md) and the WebSocket. No other module writes a server
// path. Ids are escaped here (encodeURIComponent), so an id with "/" or "?"
// stays one path segment; a query parameter whose value is undefined, null
// or "" is left out.

function seg(id) {
  return encodeURIComponent(id);
}

function query(params) {
  const parts = [];
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== "") parts.push(k + "=" + encodeURIComponent(v));
  }
  return parts.length ? "?" + parts.join("&") : "";
}

function conv(id) {
  return "/api/convs/" + seg(id);
}

/** url has one function per server path the page uses. */
export const url = Object.freeze({
  me: () => "/api/me",
  server: () => "/api/server",
  login: () => "/api/login",
  logout: () => "/api/logout",
  /** socket is the WebSocket of this page's origin (the cookie authenticates it). */
  socket: () => (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws",

  /** convs: the list (GET, a page after the cursor before) or where a new one is made (POST, no arguments). */
  convs: (limit, before) => "/api/convs" + query({ limit, before }),
  /** events: sync from the cursor after; epoch 0 is none. */
  events: (id, after, limit, epoch, thread) => conv(id) + "/events" + query({ after, limit, epoch: epoch || undefined, thread: thread || undefined }),
  messages: (id) => conv(id) + "/messages",
  message: (id, seq) => conv(id) + "/messages/" + seq,
  versions: (id, seq) => conv(id) + "/messages/" + seq + "/versions",
  reaction: (id, seq, emoji) => conv(id) + "/messages/" + seq + "/reactions/" + seg(emoji),
  /** search: one page of messages matching the query q (conv: only there; cursor: the previous page's next). */
  search: (q, conv, limit, cursor) => "/api/search" + query({ q, conv, limit, cursor }),
  users: (q, limit, cursor) => "/api/users" + query({ q, limit, cursor }),
  user: (id) => "/api/users/" + seg(id),
  /** password changes the signed-in user's password (POST). */
  password: () => "/api/me/password",
  sessions: () => "/api/me/sessions",
  session: (device) => "/api/me/sessions/" + seg(device),
  dms: () => "/api/dms",
  recall: (id) => conv(id) + "/recall",
  members: (id) => conv(id) + "/members",
  member: (id, user) => conv(id) + "/members/" + seg(user),

  adminUsers: (limit, after) => "/api/admin/users" + query({ limit, after }),
  /** adminUserDisabled disables (true) or enables (false) a user. */
  adminUserDisabled: (id, disabled) => "/api/admin/users/" + seg(id) + (disabled ? "/disable" : "/enable"),
  /** adminAudit: the page of entries older than before; before 0 is the newest page. */
  adminAudit: (limit, before) => "/api/admin/audit" + query({ limit, before: before || undefined }),
  adminConvs: (limit, after) => "/api/admin/convs" + query({ limit, after }),
  adminConv: (id) => "/api/admin/convs/" + seg(id),
  adminRetention: (id) => "/api/admin/convs/" + seg(id) + "/retention",

  /** uploads: where a tus upload is created (POST); each upload is at the Location the server answers. */
  uploads: () => "/api/uploads",
  /** file: an attached file's bytes (GET, Range); thumb: its thumbnail, a JPEG (404 when it has none; again: a number that makes a later try another URL). */
  file: (id) => "/api/files/" + seg(id),
  thumb: (id, again) => "/api/files/" + seg(id) + "/thumb" + query({ again }),

  presence: (users) => "/api/presence" + query({ users }),
  /** pushLevel: a conversation's notification level (PUT); without conv all of them (GET). */
  pushKey: () => "/api/push/key",
  pushSubs: () => "/api/push/subscriptions",
  pushLevel: (conv) => "/api/push/settings" + (conv ? "/" + seg(conv) : ""),

  exports: () => "/exports",
  exportJob: (id) => "/exports/" + seg(id),
});
