// manage.js lists the management screens for the router of app.js: new
// conversations, members, export, the account and the admin screens. Each route's view
// is `view(ctx, params) → HTMLElement` (it may fill itself asynchronously),
// with ctx = {api, h, me, navigate, toast, client} as app.js builds it and
// params the path's :names.
//
// The screens load when first shown (a dynamic import), with their strings
// (i18n.js loadArea "manage"): they are not part of the page's first load.
// Until its module is there a route shows
// "Loading…"; if it cannot load (a release changed under the page), it says
// to reload.
//
// Menu entries marked admin are shown only to users whose role is admin;
// the admin routes themselves stay reachable by anyone who types the path,
// and the server's 403 "Access denied" is what a non-admin sees there.


import { t, loadArea } from "./i18n.js";

/**
 * lazy returns a view that shows a placeholder, imports its module and
 * puts the module's view fn in its place; dispose reaches the real view.
 * @param {function(): Promise<object>} load the module's dynamic import
 * @param {string} fn the view's export
 * @returns {Function}
 */
export function lazy(load, fn) {
  return (ctx, params) => {
    const el = ctx.h("div", { class: "lazy-view", role: "status" }, t("app.loading"));
    let real = null;
    let gone = false;
    el.dispose = () => {
      gone = true;
      if (real && real.dispose) real.dispose();
    };
    Promise.all([load(), loadArea("manage")]).then(([m]) => {
      if (gone) return;
      real = m[fn](ctx, params);
      el.replaceWith(real);
    }, () => {
      el.textContent = t("app.screenFailed");
    });
    return el;
  };
}

/** @type {Array<{path: string, view: Function}>} */
export const routes = [
  { path: "/new", view: lazy(() => import("./views/newconv.js"), "renderNewConv") },
  { path: "/dm", view: lazy(() => import("./views/extras.js"), "renderNewDM") },
  { path: "/c/:id/members", view: lazy(() => import("./views/members.js"), "renderMembers") },
  { path: "/exports", view: lazy(() => import("./views/export.js"), "renderExports") },
  { path: "/account", view: lazy(() => import("./views/account.js"), "renderAccount") },
  { path: "/admin/users", view: lazy(() => import("./views/admin.js"), "renderAdminUsers") },
  { path: "/admin/audit", view: lazy(() => import("./views/admin.js"), "renderAdminAudit") },
  { path: "/admin/convs", view: lazy(() => import("./views/admin.js"), "renderAdminConvs") },
];

/**
 * The top bar's menu; label() is the entry's text in the page's language
 * (looked up when the shell is built, after the catalogue loaded).
 * @type {Array<{label: function(): string, path: string, admin?: boolean}>}
 */
export const menu = [
  { label: () => t("app.menu.new"), path: "/new" },
  { label: () => t("app.menu.dm"), path: "/dm" },
  { label: () => t("app.menu.export"), path: "/exports" },
  { label: () => t("app.menu.account"), path: "/account" },
  // One entry for the three admin screens (they link each other), so the
  // top bar stays short at 360 px.
  { label: () => t("app.menu.admin"), path: "/admin/users", admin: true },
];
