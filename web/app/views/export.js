// The export screen (/exports): start an export of all one's conversations
// or of one (POST /exports {scope} with an Idempotency-Key), follow its
// progress (GET /exports/{id}: state and shards done/total) and download
// the artifact when it is done.
//
// The download is a plain <a href download> to the job's signed
// /download/{id} link: the server answers Range requests against the
// artifact's strong ETag, so the browser itself can resume a broken
// download. A link is valid for url_expires_in seconds (300); the screen
// fetches a fresh one before following a link older than that allows.
//
// The API has no listing of a user's own jobs, so the ids of the jobs
// started here are kept in localStorage (per user, the latest few) and
// shown again after a reload; a job the server no longer knows is shown as
// gone and can be forgotten.

import { h, clear } from "../dom.js";
import { retryDelay } from "../backoff.js";
import { newID } from "../id.js";
import { url } from "../urls.js";
import { button, busy, errorText, field, screen, statusLine, when } from "./forms.js";

const keep = 10; // jobs remembered per user
const pollMs = 1000; // progress poll while a job is queued or running
const finished = new Set(["done", "failed", "revoked", "expired"]);

function storageKey(ctx) {
  return `parley.exports.${ctx.me && ctx.me.user ? ctx.me.user.id : ""}`;
}

// remembered returns the job ids kept for this user, newest first.
function remembered(ctx) {
  try {
    const v = JSON.parse(localStorage.getItem(storageKey(ctx)) || "[]");
    return Array.isArray(v) ? v.filter((x) => typeof x === "string") : [];
  } catch {
    return [];
  }
}

function remember(ctx, ids) {
  try {
    localStorage.setItem(storageKey(ctx), JSON.stringify(ids.slice(0, keep)));
  } catch {
    // Private mode or a full quota: the job still shows until the page goes.
  }
}

// fillScopes lists "all" and every conversation of the core's list in
// scope, keeping the choice; the screen runs it again when the list changes.
function fillScopes(scope, client) {
  const chosen = scope.value || "all";
  let convs = [];
  try {
    convs = (client && client.conversations ? client.conversations() : []) || [];
  } catch {
    convs = [];
  }
  clear(scope);
  scope.append(h("option", { value: "all" }, "All my conversations"));
  for (const c of convs) {
    const id = c.conv || c.id;
    if (id && c.member !== false) scope.append(h("option", { value: `conv:${id}` }, c.title || id));
  }
  scope.value = chosen;
  if (scope.value !== chosen) scope.value = "all";
}

// renderExports is the view of /exports.
export function renderExports(ctx) {
  const status = statusLine();
  const scope = h("select", { "data-test": "export-scope" });
  const refill = () => fillScopes(scope, ctx.client);
  refill();
  const offConvs = ctx.client && ctx.client.on ? ctx.client.on("convs", refill) : () => {};
  const start = h("button", { type: "submit", class: "m-primary", "data-test": "export-start" }, "Start export");
  const jobs = h("ul", { class: "m-list", "data-test": "export-jobs", "aria-label": "Your exports" });
  const rows = new Map(); // job id → row controller
  let pending = null; // {key, scope}: a start whose outcome is unknown

  async function startExport(e) {
    e.preventDefault();
    const s = scope.value;
    // A retry after an unknown outcome reuses the key: the server answers
    // the same job (replayed) instead of making a second one.
    if (!pending || pending.scope !== s) pending = { key: newID().replaceAll("-", ""), scope: s };
    status.show("Starting the export…");
    let job;
    try {
      job = await busy(start, ctx.api("POST", url.exports(), { scope: s }, { "Idempotency-Key": pending.key }));
    } catch (err) {
      if (err.code !== "UNAVAILABLE" && err.status !== 0) pending = null;
      status.error(err);
      return;
    }
    pending = null;
    // reused: a finished export of the same scope with nothing new since
    // (the server answers it rather than writing the same file again).
    status.show(job.reused ? "Nothing new since your last export of this: it is ready below."
      : job.replayed ? "That export was already started." : "Export started.");
    const ids = remembered(ctx).filter((id) => id !== job.job_id);
    ids.unshift(job.job_id);
    remember(ctx, ids);
    addRow(job.job_id, job, true);
  }

  function addRow(id, job, first) {
    if (rows.has(id)) {
      rows.get(id).update(job);
      return;
    }
    const row = new JobRow(ctx, id, () => {
      remember(ctx, remembered(ctx).filter((x) => x !== id));
      rows.get(id).stop();
      rows.delete(id);
      row.el.remove();
    });
    rows.set(id, row);
    if (first) jobs.prepend(row.el);
    else jobs.append(row.el);
    if (job) row.update(job);
    row.poll();
  }

  const view = screen("Export", "exports",
    h("p", { class: "m-hint" },
      "An export is a gzip-compressed JSON Lines file of the messages you can see, made on the server. " +
      "The download can be resumed by the browser if it breaks."),
    h("form", { class: "m-form m-row", on: { submit: startExport } }, field("What to export", scope), start),
    status.el,
    h("h2", { class: "m-h2" }, "Your exports"),
    jobs,
  );
  for (const id of remembered(ctx)) addRow(id, null, false);
  // app.js calls dispose when the screen is left: the polls stop.
  view.dispose = () => {
    offConvs();
    for (const r of rows.values()) r.stop();
  };
  return view;
}

// JobRow shows one job and polls it until it is finished, while its row is
// on the page.
class JobRow {
  constructor(ctx, id, forget) {
    this.ctx = ctx;
    this.id = id;
    this.forget = forget;
    this.state = h("span", { class: "m-badge", "data-test": "export-state" }, "…");
    this.bar = h("progress", { max: "1", "aria-label": "Export progress" });
    this.text = h("span", { class: "m-hint", "data-test": "export-progress" });
    this.detail = h("div", { class: "m-detail" });
    this.el = h("li", { class: "m-item m-job", "data-test": `export-${id}`, "data-job": id },
      h("div", { class: "m-row" }, h("strong", {}, "Export "), h("code", {}, id), " ", this.state),
      h("div", { class: "m-row" }, this.bar, this.text),
      this.detail);
    this.timer = 0;
    this.stopped = false;
    this.linkAt = 0; // when the current link was fetched (ms)
    this.linkTTL = 0; // its lifetime (ms)
    this.last = null;
  }

  get job() {
    return this.last;
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  update(job) {
    const { detail } = this;
    this.last = job;
    this.state.textContent = job.state;
    this.el.setAttribute("data-state", job.state);
    this.drawProgress(job);
    clear(detail);
    detail.append(h("div", { class: "m-hint" }, `Scope: ${job.scope === "all" ? "all conversations" : job.scope}; started ${when(job.created_at)}`));
    if (job.state === "done") {
      this.linkAt = Date.now();
      this.linkTTL = (job.url_expires_in || 300) * 1000;
      detail.append(h("div", { class: "m-hint" },
        `${formatBytes(job.bytes)} · sha256 `, h("code", { class: "m-hash", "data-test": "export-sha256" }, job.sha256 || ""),
        job.expires_at ? ` · available until ${when(job.expires_at)}` : ""));
      if (job.url) {
        const a = h("a", {
          href: job.url, download: `parley-export-${this.id}.jsonl.gz`, class: "m-button m-primary",
          "data-test": "export-download", on: { click: (e) => this.follow(e) },
        }, "Download");
        detail.append(a);
      } else {
        detail.append(h("div", { class: "m-hint" }, "This server gives no download links."));
      }
    }
    if (job.error) detail.append(h("div", { class: "m-error", role: "alert" }, job.error));
    if (finished.has(job.state) && job.state !== "done") {
      detail.append(button("Forget", this.forget, { "data-test": "export-forget" }));
    }
  }

  drawProgress(job) {
    const { bar, text } = this;
    const done = job.progress ? job.progress.done : 0;
    const total = job.progress ? job.progress.total : 0;
    if (total > 0) {
      bar.max = total;
      bar.value = done;
      text.textContent = `${done} of ${total} shards (${Math.floor((100 * done) / total)}%)`;
    } else {
      bar.removeAttribute("value"); // indeterminate until the shards are counted
      text.textContent = job.state === "queued" ? "waiting for a worker" : "";
    }
    if (job.state === "done") {
      bar.max = 1;
      bar.value = 1;
      text.textContent = total > 0 ? `${total} of ${total} shards (100%)` : "complete";
    }
  }

  // follow refreshes an old link before the browser follows it: the link's
  // signature expires, the job does not.
  async follow(e) {
    if (Date.now() - this.linkAt < this.linkTTL - 30000) return;
    e.preventDefault();
    const a = e.currentTarget;
    try {
      this.update(await this.ctx.api("GET", url.exportJob(this.id)));
    } catch (err) {
      this.detail.append(h("div", { class: "m-error", role: "alert" }, errorText(err)));
      return;
    }
    const fresh = this.el.querySelector('[data-test="export-download"]');
    if (fresh && fresh !== a) fresh.click();
  }

  async poll() {
    if (this.stopped) return;
    if (this.timer && !this.el.isConnected) {
      this.stop(); // the screen was left
      return;
    }
    let wait = pollMs;
    try {
      const job = await this.ctx.api("GET", url.exportJob(this.id));
      this.update(job);
      if (finished.has(job.state)) return;
    } catch (err) {
      if (err.code === "NOT_FOUND") {
        this.state.textContent = "gone";
        this.el.setAttribute("data-state", "gone");
        clear(this.detail);
        this.detail.append(h("div", { class: "m-hint" }, "The server no longer has this export."),
          button("Forget", this.forget, { "data-test": "export-forget" }));
        return;
      }
      if (err.code !== "UNAVAILABLE" && err.code !== "RATE_LIMITED") {
        this.detail.append(h("div", { class: "m-error", role: "alert" }, errorText(err)));
        return;
      }
      this.text.textContent = errorText(err);
      wait = retryDelay(err, 2000, 250);
    }
    if (!this.stopped) this.timer = setTimeout(() => this.poll(), wait);
  }
}

// formatBytes renders a size for people.
function formatBytes(n) {
  if (!n) return "0 B";
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i === 0 ? v : v.toFixed(1)} ${units[i]}`;
}
