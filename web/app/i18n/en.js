// en.js: the English catalogue (see i18n.js). The object is JSON with
// comment lines: web's TestCatalogues reads it, and every key here is in
// zh.js too. Sections follow the modules that use them.
export default {
// errors: the sentence for each error code of the protocol
"error.INVALID_ARGUMENT": "The server could not accept that request.",
"error.UNAUTHENTICATED": "You are not signed in, or your session has ended.",
"error.NOT_MEMBER": "You are not a member of this conversation.",
"error.IDEMPOTENCY_MISMATCH": "This request was already used for something else; try again.",
"error.ORIGINAL_EXPIRED": "This was sent, but its receipt has expired.",
"error.NOT_SENDER": "Only the sender can do that with this message.",
"error.ALREADY_RECALLED": "This message was already recalled.",
"error.RECALL_WINDOW_EXPIRED": "Too late: messages can only be recalled for a while after they are sent.",
"error.EDIT_WINDOW_EXPIRED": "Too late: messages can only be edited for a while after they are sent.",
"error.NOT_FOUND": "That could not be found; it may have been removed.",
"error.CURSOR_AHEAD": "This conversation changed on the server; it is being reloaded.",
"error.EPOCH_CHANGED": "This conversation changed on the server; it is being reloaded.",
"error.STALE_INSTALL": "This browser's sign-in was replaced by a newer one. Sign in again.",
"error.PERMISSION_DENIED": "You are not allowed to do that.",
"error.ALREADY_EXISTS": "That already exists.",
"error.UNAVAILABLE": "The server cannot be reached right now; it will be tried again.",
"error.RATE_LIMITED": "Too many requests; wait a moment and try again.",
"error.TOO_LARGE": "That is too large for this server.",
"error.unknown": "Something went wrong; try again.",
// end errors

// app: the shell, sign-in, the list, notifications, live signals
// end app

// chat: the timeline, the composer, the thread, reactions, files, search
// end chat

// manage: new conversation, members, export, admin, account
// end manage
"lang.name": "English"
};
