// i18n.js owns the page's language: which catalogue its strings come from
// (English or Simplified Chinese), the locale its dates and numbers are
// written in, and the sentence that stands for an error code.
//
// The language is the one the user picked in the app (kept in
// localStorage), else the first of the browser's languages that has a
// catalogue, else English. The locale is the browser's own tag when it is
// of that language (en-GB writes a 24-hour clock, en-US a 12-hour one),
// else the catalogue's default (zh-CN). load() must finish before anything
// is rendered: app.js awaits it first.
//
// Every string the page shows is t(key) of the one catalogue per language
// (i18n/en.js, i18n/zh.js, with the strings of screens loaded on demand in
// files of their own, i18n/AREA.LANG.js, added by loadArea); web's
// TestCatalogues fails when a key used in any module is missing from
// either language. Placeholders are {name};
// a value given as {one, other} is chosen by Intl.PluralRules on {n}.

const KEY = "parley.lang"; // localStorage: the language the user picked

/** The languages with a catalogue: code → its name (in itself) and default locale. */
export const LANGUAGES = {
  en: { name: "English", locale: "en" },
  zh: { name: "中文", locale: "zh-CN" },
};

const loaders = {
  en: () => import("./i18n/en.js"),
  zh: () => import("./i18n/zh.js"),
};

// The strings of screens that load on demand, by area, loaded with them
// (loadArea): the first load carries only the catalogue's core.
const areas = {
  manage: { en: () => import("./i18n/manage.en.js"), zh: () => import("./i18n/manage.zh.js") },
};
const loadedAreas = new Map(); // area → the promise of its strings

let lang = "en";
let locale = "en";
let catalogue = {};
let plural = new Intl.PluralRules("en");
const formats = new Map();

/**
 * pick chooses the language: the user's choice, else the browser's.
 * @returns {{lang: string, locale: string}}
 */
function pick() {
  let chosen = "";
  try {
    chosen = localStorage.getItem(KEY) || "";
  } catch {
    // storage blocked: the browser's languages decide
  }
  const tags = navigator.languages && navigator.languages.length ? navigator.languages : [navigator.language || "en"];
  if (!LANGUAGES[chosen]) {
    chosen = "";
    for (const tag of tags) {
      const base = String(tag).toLowerCase().split("-")[0];
      if (LANGUAGES[base]) {
        chosen = base;
        break;
      }
    }
  }
  if (!chosen) chosen = "en";
  let loc = LANGUAGES[chosen].locale;
  for (const tag of tags) {
    if (String(tag).toLowerCase().split("-")[0] === chosen) {
      loc = tag;
      break;
    }
  }
  return { lang: chosen, locale: loc };
}

/**
 * load reads the catalogue of the chosen language and sets <html lang>.
 * A catalogue that cannot load (offline before it was cached) falls back
 * to English.
 */
export async function load() {
  const p = pick();
  try {
    catalogue = (await loaders[p.lang]()).default;
    lang = p.lang;
    locale = p.locale;
  } catch (e) {
    if (p.lang === "en") throw e;
    catalogue = (await loaders.en()).default;
    lang = "en";
    locale = "en";
  }
  try {
    plural = new Intl.PluralRules(locale);
  } catch {
    locale = LANGUAGES[lang].locale;
    plural = new Intl.PluralRules(locale);
  }
  formats.clear();
  document.documentElement.lang = locale;
}

/**
 * loadArea adds the strings of an area (a key of areas) to the catalogue;
 * a screen of that area awaits it before it renders. It loads once.
 * @param {string} area
 * @returns {Promise<void>}
 */
export function loadArea(area) {
  let p = loadedAreas.get(area);
  if (!p) {
    p = areas[area][lang]().then((m) => {
      Object.assign(catalogue, m.default);
    });
    p.catch(() => loadedAreas.delete(area)); // a later screen asks again
    loadedAreas.set(area, p);
  }
  return p;
}

/** language returns the code of the page's language ("en", "zh"). */
export function language() {
  return lang;
}

/**
 * choose keeps the user's language and reloads the page in it.
 * @param {string} code a key of LANGUAGES
 */
export function choose(code) {
  if (!LANGUAGES[code]) return;
  try {
    localStorage.setItem(KEY, code);
  } catch {
    // storage blocked: the choice lasts this page only
  }
  location.reload();
}

/**
 * t returns the string of key with {placeholders} filled from params; a
 * value of the form {one, other, …} is chosen by the plural rule of
 * params.n. A key missing from the catalogue (a bug the tests catch)
 * shows as the key.
 * @param {string} key
 * @param {Object<string, *>} [params]
 * @returns {string}
 */
export function t(key, params) {
  let s = catalogue[key];
  if (s === undefined) return key;
  if (typeof s === "object") s = s[plural.select(Number(params && params.n) || 0)] || s.other;
  if (!params) return s;
  return s.replace(/\{(\w+)\}/g, (m, name) => (name in params ? String(params[name]) : m));
}

/**
 * errorText returns the sentence for an error (an ApiError, an error
 * frame, or a bare code) in the page's language: never the raw code.
 * @param {{code?: string}|string} e
 * @returns {string}
 */
export function errorText(e) {
  const code = typeof e === "string" ? e : (e && e.code) || "";
  const s = catalogue["error." + code];
  return s === undefined ? t("error.unknown") : s;
}

function format(name, opts) {
  let f = formats.get(name);
  if (!f) {
    f = new Intl.DateTimeFormat(locale, opts);
    formats.set(name, f);
  }
  return f;
}

/**
 * when formats a time: "time" (14:05), "day" (Mon, 7 Dec 2026), "date"
 * (7 Dec 2026), "datetime" (7 Dec 2026, 14:05), in the page's locale.
 * @param {Date|number|string} d
 * @param {"time"|"day"|"date"|"datetime"} [style]
 * @returns {string}
 */
export function when(d, style) {
  const date = d instanceof Date ? d : new Date(d);
  if (isNaN(date.getTime())) return "";
  switch (style) {
    case "time":
      return format("time", { hour: "numeric", minute: "2-digit" }).format(date);
    case "day":
      return format("day", { weekday: "short", year: "numeric", month: "short", day: "numeric" }).format(date);
    case "date":
      return format("date", { year: "numeric", month: "short", day: "numeric" }).format(date);
    default:
      return format("datetime", { year: "numeric", month: "short", day: "numeric", hour: "numeric", minute: "2-digit" }).format(date);
  }
}

/**
 * number formats n in the page's locale (4,000).
 * @param {number} n
 * @returns {string}
 */
export function number(n) {
  return Number(n).toLocaleString(locale);
}
