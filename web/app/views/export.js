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
import { humanSize } from "../bytes.js";
import { t, when, number } from "../i18n.js";
import { button, busy, errorText, field, screen, statusLine } from "./forms.js";

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
  scope.append(h("option", { value: "all" }, t("manage.export.all")));
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
  const start = h("button", { type: "submit", class: "m-primary", "data-test": "export-start" }, t("manage.export.start"));
  const jobs = h("ul", { class: "m-list", "data-test": "export-jobs", "aria-label": t("manage.export.yours") });
  const rows = new Map(); // job id → row controller
  let pending = null; // {key, scope}: a start whose outcome is unknown

  async function startExport(e) {
    e.preventDefault();
    const s = scope.value;
    // A retry after an unknown outcome reuses the key: the server answers
    // the same job (replayed) instead of making a second one.
    if (!pending || pending.scope !== s) pending = { key: newID().replaceAll("-", ""), scope: s };
    status.show(t("manage.export.starting"));
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
    status.show(job.reused ? t("manage.export.reused") : job.replayed ? t("manage.export.replayed") : t("manage.export.started"));
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

  const view = screen(t("manage.export.title"), "exports",
    h("p", { class: "m-hint" }, t("manage.export.help")),
    h("form", { class: "m-form m-row", on: { submit: startExport } }, field(t("manage.export.what"), scope), start),
    status.el,
    h("h2", { class: "m-h2" }, t("manage.export.yours")),
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
    this.bar = h("progress", { max: "1", "aria-label": t("manage.export.progress") });
    this.text = h("span", { class: "m-hint", "data-test": "export-progress" });
    this.detail = h("div", { class: "m-detail" });
    this.el = h("li", { class: "m-item m-job", "data-test": `export-${id}`, "data-job": id },
      h("div", { class: "m-row" }, h("strong", {}, t("manage.export.job")), " ", h("code", {}, id), " ", this.state),
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
    this.state.textContent = stateText(job.state);
    this.el.setAttribute("data-state", job.state);
    this.drawProgress(job);
    clear(detail);
    detail.append(h("div", { class: "m-hint" }, t("manage.export.scope", { scope: this.scopeText(job.scope), started: when(job.created_at, "datetime") })));
    if (job.state === "done") {
      this.linkAt = Date.now();
      this.linkTTL = (job.url_expires_in || 300) * 1000;
      detail.append(h("div", { class: "m-hint" },
        `${humanSize(job.bytes || 0)} · sha256 `, h("code", { class: "m-hash", "data-test": "export-sha256" }, job.sha256 || ""),
        job.expires_at ? " · " + t("manage.export.until", { time: when(job.expires_at, "datetime") }) : ""));
      if (job.url) {
        const a = h("a", {
          href: job.url, download: `parley-export-${this.id}.jsonl.gz`, class: "m-button m-primary",
          "data-test": "export-download", on: { click: (e) => this.follow(e) },
        }, t("manage.export.download"));
        detail.append(a);
      } else {
        detail.append(h("div", { class: "m-hint" }, t("manage.export.noLinks")));
      }
    }
    // The job's error is the server's English detail, for operators: the
    // page says what it means for the user.
    if (job.state === "failed") detail.append(h("div", { class: "m-error", role: "alert", "data-error": job.error || "" }, t("manage.export.failed")));
    if (finished.has(job.state) && job.state !== "done") {
      detail.append(button(t("manage.export.forget"), this.forget, { "data-test": "export-forget", "aria-label": t("manage.export.forgetLabel", { id: this.id }) }));
    }
  }

  // scopeText names what a job exports: all, or the conversation's title.
  scopeText(scope) {
    if (scope === "all") return t("manage.export.allConvs");
    const id = String(scope || "").replace(/^conv:/, "");
    let c;
    try {
      c = (this.ctx.client && this.ctx.client.conversations ? this.ctx.client.conversations() : []).find((x) => (x.conv || x.id) === id);
    } catch {
      c = undefined;
    }
    return (c && c.title) || id;
  }

  drawProgress(job) {
    const { bar, text } = this;
    const done = job.progress ? job.progress.done : 0;
    const total = job.progress ? job.progress.total : 0;
    if (total > 0) {
      bar.max = total;
      bar.value = done;
      text.textContent = shardsText(done, total);
    } else {
      bar.removeAttribute("value"); // indeterminate until the shards are counted
      text.textContent = job.state === "queued" ? t("manage.export.waiting") : "";
    }
    if (job.state === "done") {
      bar.max = 1;
      bar.value = 1;
      text.textContent = total > 0 ? shardsText(total, total) : t("manage.export.complete");
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
        this.state.textContent = stateText("gone");
        this.el.setAttribute("data-state", "gone");
        clear(this.detail);
        this.detail.append(h("div", { class: "m-hint" }, t("manage.export.gone")),
          button(t("manage.export.forget"), this.forget, { "data-test": "export-forget", "aria-label": t("manage.export.forgetLabel", { id: this.id }) }));
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

// stateText says a job's state (the protocol's word) in the page's language.
function stateText(state) {
  switch (state) {
    case "queued": return t("manage.export.queued");
    case "running": return t("manage.export.running");
    case "done": return t("manage.export.done");
    case "failed": return t("manage.export.stateFailed");
    case "revoked": return t("manage.export.revoked");
    case "expired": return t("manage.export.expired");
    case "gone": return t("manage.export.stateGone");
    default: return state;
  }
}

// shardsText is the progress in words: "3 of 10 shards (30%)".
function shardsText(done, total) {
  return t("manage.export.shards", { n: total, done: number(done), total: number(total), pct: number(Math.floor((100 * done) / total)) });
}
