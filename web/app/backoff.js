// backoff.js owns how long the page waits before trying again: full-jitter
// exponential backoff for its own retry loops (the socket's reconnects, the
// outbox's resends), and the server's Retry-After where it gave one.

const BASE_MS = 500;

/** The longest backoff wait. */
export const CAP_MS = 30000;

// Past this many attempts 0.5 s·2^attempt is far beyond the cap: counting on
// changes nothing but the risk of overflow.
const MAX_ATTEMPT = 16;

/** Backoff counts the failed attempts of one retry loop. */
export class Backoff {
  /** @param {function(): number} [random] in [0, 1); Math.random unless a test fixes it */
  constructor(random) {
    this.random = random || Math.random;
    this.attempt = 0;
  }

  /**
   * next counts one more failed attempt and returns how long to wait before
   * the next: a random time in [0, min(30 s, 0.5 s·2^attempt)), attempt
   * counted from 0 (full jitter, so clients that failed together do not
   * come back together).
   * @returns {number} ms
   */
  next() {
    const ceil = Math.min(CAP_MS, BASE_MS * 2 ** this.attempt);
    this.attempt = Math.min(this.attempt + 1, MAX_ATTEMPT);
    return this.random() * ceil;
  }

  /** reset starts the loop over after a success: the next wait is short again. */
  reset() {
    this.attempt = 0;
  }
}

/**
 * retryDelay is how long to wait before retrying after err: the server's
 * Retry-After (err.retryAfterMs, RATE_LIMITED or UNAVAILABLE) when it gave
 * one, but not less than floorMs; else fallbackMs.
 * @param {*} err usually an ApiError
 * @param {number} fallbackMs
 * @param {number} [floorMs]
 * @returns {number} ms
 */
export function retryDelay(err, fallbackMs, floorMs) {
  if (err && err.retryAfterMs > 0) return Math.max(err.retryAfterMs, floorMs || 0);
  return fallbackMs;
}
