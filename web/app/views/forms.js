// Shared pieces of the management screens (new conversation, members,
// export, admin): how an API error reads to a person, a status line that
// screen readers announce, labelled fields, and buttons that stay disabled
// while their request is in flight.
//
// Everything here builds elements with h() from dom.js: data from the server
// only ever becomes text nodes or attribute values, never markup.

import { h } from "../dom.js";
import { errorText as sentence, t, number } from "../i18n.js";
import { humanSize } from "../bytes.js";

// errorText turns an error from api() (an ApiError) into the sentence shown
// to the user, in the page's language, never the raw code: special maps a
// code to the screen's own sentence for it (the same code means different
// things on different screens), else the page's sentence for the code.
// RATE_LIMITED says when to try again, UNAVAILABLE that trying again is the
// remedy (these screens do not retry by themselves).
export function errorText(err, special) {
  if (!err) return "";
  const code = err.code || "";
  if (special && special[code]) return special[code];
  if (code === "RATE_LIMITED") return t("manage.error.rateLimited", { wait: waitText(err.retryAfterMs) });
  if (code === "UNAVAILABLE") return t("manage.error.unavailable");
  return sentence(code);
}

// waitText says a Retry-After for people: seconds, else whole minutes.
function waitText(ms) {
  const s = Math.max(1, Math.ceil((ms || 1000) / 1000));
  return s < 120 ? t("manage.seconds", { n: s, count: number(s) }) : t("manage.minutes", { n: Math.ceil(s / 60), count: number(Math.ceil(s / 60)) });
}

// statusLine returns a live region for the outcome of actions: show(text)
// for progress and success, error(err, special) for failures (role alert,
// the sentence of errorText). The element carries data-test="status"; an
// error also sets data-code to the protocol code so tests can tell
// outcomes apart (the code is an attribute, never shown).
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
    error(err, special) {
      el.textContent = errorText(err, special);
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

// usageText says what files take against a quota: "2.1 GB of 10.7 GB
// (3 files)". files is the API's {files, bytes, quota}.
export function usageText(files) {
  return t("manage.files.usage", { used: humanSize(files.bytes), quota: humanSize(files.quota), n: files.files, count: number(files.files) });
}

// usageMeter is a <meter> of files.bytes against files.quota, labelled by
// text for assistive technology; high from 90 %.
export function usageMeter(files, label) {
  return h("meter", { min: "0", max: String(files.quota), high: String(Math.floor(files.quota * 0.9)),
    optimum: "0", value: String(Math.min(files.bytes, files.quota)), "aria-label": label, title: usageText(files) });
}
