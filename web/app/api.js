// api.js owns the HTTP API calls of the page: same-origin fetches with the
// session cookie, JSON in and out, to the URLs urls.js builds. It promises
// one error type, ApiError, carrying the protocol code of the server's
// problem+json body (docs/protocol.md#error-codes), so callers decide on
// `code` alone: a network failure, or an answer without a code other than
// a 401 (UNAUTHENTICATED), is UNAVAILABLE (retryable), never a terminal
// code.

/** ApiError is a refused or failed API call. */
export class ApiError extends Error {
  /**
   * @param {string} code protocol code, e.g. "NOT_MEMBER", "UNAVAILABLE"
   * @param {number} status HTTP status; 0 for a network failure
   * @param {string} detail the server's human-readable detail
   * @param {number} retryAfterMs from Retry-After (429/503), else 0
   */
  constructor(code, status, detail, retryAfterMs) {
    super(detail || code);
    this.name = "ApiError";
    /** @type {string} */ this.code = code;
    /** @type {number} */ this.status = status;
    /** @type {string} */ this.detail = detail || "";
    /** @type {number} */ this.retryAfterMs = retryAfterMs || 0;
  }
}

/**
 * The retryable codes: after one of these the request is kept and sent
 * again (same key) after a wait; after any other code it must not be
 * retried (docs/protocol.md#error-codes).
 */
export const RETRYABLE = new Set(["UNAVAILABLE", "RATE_LIMITED"]);

/**
 * api calls the HTTP API.
 * @param {string} method "GET", "POST", "PUT", "DELETE"
 * @param {string} path from urls.js, e.g. url.me()
 * @param {*} [body] JSON-encoded when given
 * @param {Object<string,string>} [headers] extra headers (Idempotency-Key)
 * @returns {Promise<*>} the decoded JSON body; null for 204
 * @throws {ApiError}
 */
export async function api(method, path, body, headers) {
  const init = { method, credentials: "same-origin", headers: { Accept: "application/json", ...(headers || {}) } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    throw new ApiError("UNAVAILABLE", 0, "network error: " + (e && e.message ? e.message : e), 0);
  }
  if (res.status === 204) return null;
  let data = null;
  try {
    data = await res.json();
  } catch {
    data = null;
  }
  if (res.ok) return data;
  const ra = Number(res.headers.get("Retry-After"));
  const code = (data && data.code) || (res.status === 401 ? "UNAUTHENTICATED" : "UNAVAILABLE");
  throw new ApiError(code, res.status, (data && data.detail) || res.statusText, Number.isFinite(ra) ? ra * 1000 : 0);
}
