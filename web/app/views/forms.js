// Shared pieces of the management screens (new conversation, members,
// export, admin): how an API error reads to a person, a status line that
// screen readers announce, labelled fields, and buttons that stay disabled
// while their request is in flight.
//
// Everything here builds elements with h() from dom.js: data from the server
// only ever becomes text nodes or attribute values, never markup.

import { h } from "../dom.js";

// errorText turns an error from api() (an ApiError) into the sentence shown
// to the user. The server's message is shown as it is (it is written for
// people); RATE_LIMITED says when to try again, UNAVAILABLE says that trying
// again is the remedy, since an outage is never a final answer.
export function errorText(err) {
  if (!err) return "";
  const code = err.code || "";
  const msg = err.message || err.detail || String(err);
  if (code === "RATE_LIMITED") {
    return `Too many requests: try again in ${waitText(err.retryAfterMs)}. (${msg})`;
  }
  if (code === "UNAVAILABLE") {
    return "The server is unavailable right now: try again in a moment.";
  }
  if (code && msg && !msg.includes(code)) return `${msg} (${code})`;
  return msg;
}

// waitText says a Retry-After for people: seconds, else whole minutes.
function waitText(ms) {
  const s = Math.max(1, Math.ceil((ms || 1000) / 1000));
  return s < 120 ? `${s} s` : `${Math.ceil(s / 60)} min`;
}

// statusLine returns a live region for the outcome of actions: show(text)
// for progress and success, error(err) for failures (role alert). The
// element carries data-test="status"; an error also sets data-code to the
// protocol code so tests can tell outcomes apart.
export function statusLine() {
  const el = h("p", { class: "m-status", "data-test": "status", "aria-live": "polite" });
  return {
    el,
    show(text) {
      el.textContent = text;
      el.className = "m-status";
      el.removeAttribute("role");
      el.removeAttribute("data-code");
    },
    error(err) {
      el.textContent = errorText(err);
      el.className = "m-status m-error";
      el.setAttribute("role", "alert");
      el.setAttribute("data-code", (err && err.code) || "ERROR");
    },
    clear() {
      el.textContent = "";
      el.className = "m-status";
      el.removeAttribute("role");
      el.removeAttribute("data-code");
    },
  };
}

let nextFieldId = 0;

// field wraps input in a label (and an optional hint tied to it with
// aria-describedby) so every control has an accessible name.
export function field(label, input, hint) {
  if (!input.id) input.id = `m-field-${++nextFieldId}`;
  const parts = [h("label", { for: input.id }, label), input];
  if (hint) {
    const hid = `${input.id}-hint`;
    input.setAttribute("aria-describedby", hid);
    parts.push(h("small", { id: hid, class: "m-hint" }, hint));
  }
  return h("div", { class: "m-field" }, ...parts);
}

// input makes an <input> with the given attributes; value is set as a
// property, not markup.
export function input(attrs, value) {
  const el = h("input", attrs);
  if (value !== undefined) el.value = value;
  return el;
}

// button makes a <button type="button"> that runs onClick.
export function button(label, onClick, attrs) {
  return h("button", Object.assign({ type: "button", on: { click: onClick } }, attrs || {}), label);
}

// busy disables el while promise runs and returns the promise, so a
// double click cannot send a request twice.
export async function busy(el, promise) {
  el.disabled = true;
  el.setAttribute("aria-busy", "true");
  try {
    return await promise;
  } finally {
    el.disabled = false;
    el.removeAttribute("aria-busy");
  }
}

// screen is the frame of a management screen: a heading and its parts.
export function screen(title, testName, ...children) {
  return h(
    "section",
    { class: "m-screen", "data-test": testName, "aria-labelledby": `${testName}-title` },
    h("h1", { id: `${testName}-title`, class: "m-title" }, title),
    ...children,
  );
}

// when formats an RFC 3339 time from the server in the user's locale; an
// empty value stays empty.
export function when(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  return d.toLocaleString();
}

// sizeText renders a byte count for people, in binary units as the
// policy file writes them: "512 bytes", "1.5 KiB", "2.1 GiB", "10 GiB"
// (one decimal under 10, none above).
export function sizeText(bytes) {
  const n = Number(bytes) || 0;
  if (n < 1024) return n === 1 ? "1 byte" : `${n} bytes`;
  const units = ["KiB", "MiB", "GiB", "TiB", "PiB"];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  const text = v < 10 ? (Math.floor(v * 10) / 10).toFixed(1).replace(/\.0$/, "") : String(Math.floor(v));
  return `${text} ${units[i]}`;
}

// usageText says what files take against a quota: "2.1 GiB of 10 GiB
// (3 files)". files is the API's {files, bytes, quota}.
export function usageText(files) {
  const n = files.files === 1 ? "1 file" : `${files.files} files`;
  return `${sizeText(files.bytes)} of ${sizeText(files.quota)} (${n})`;
}

// usageMeter is a <meter> of files.bytes against files.quota, labelled by
// text for assistive technology; high from 90 %.
export function usageMeter(files, label) {
  return h("meter", { min: "0", max: String(files.quota), high: String(Math.floor(files.quota * 0.9)),
    optimum: "0", value: String(Math.min(files.bytes, files.quota)), "aria-label": label, title: usageText(files) });
}
