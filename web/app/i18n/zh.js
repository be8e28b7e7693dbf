// zh.js: the Simplified Chinese catalogue (see i18n.js). The object is
// JSON with comment lines: web's TestCatalogues reads it, and every key
// here is in en.js too. Sections follow the modules that use them.
export default {
// errors: the sentence for each error code of the protocol
"error.INVALID_ARGUMENT": "服务器无法接受这个请求。",
"error.UNAUTHENTICATED": "你尚未登录，或会话已结束。",
"error.NOT_MEMBER": "你不是这个会话的成员。",
"error.IDEMPOTENCY_MISMATCH": "这个请求已被用于其他操作，请重试。",
"error.ORIGINAL_EXPIRED": "消息已发送，但其回执已过期。",
"error.NOT_SENDER": "只有发送者才能对这条消息这样做。",
"error.ALREADY_RECALLED": "这条消息已被撤回。",
"error.RECALL_WINDOW_EXPIRED": "太晚了：消息只能在发送后的一段时间内撤回。",
"error.EDIT_WINDOW_EXPIRED": "太晚了：消息只能在发送后的一段时间内编辑。",
"error.NOT_FOUND": "找不到该内容，它可能已被删除。",
"error.CURSOR_AHEAD": "这个会话在服务器上已变化，正在重新加载。",
"error.EPOCH_CHANGED": "这个会话在服务器上已变化，正在重新加载。",
"error.STALE_INSTALL": "此浏览器的登录已被更新的登录取代，请重新登录。",
"error.PERMISSION_DENIED": "你无权这样做。",
"error.ALREADY_EXISTS": "该内容已存在。",
"error.UNAVAILABLE": "暂时无法连接服务器，稍后会自动重试。",
"error.RATE_LIMITED": "请求过于频繁，请稍候再试。",
"error.TOO_LARGE": "内容太大，超出了此服务器的限制。",
"error.unknown": "出了点问题，请重试。",
// end errors

// app: the shell, sign-in, the list, notifications, live signals
// end app

// chat: the timeline, the composer, the thread, reactions, files, search
// end chat

// manage: new conversation, members, export, admin, account
// end manage
"lang.name": "中文"
};
