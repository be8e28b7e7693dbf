// manage.js lists the management screens for the router of app.js: new
// conversations, members, export and the admin screens. Each route's view
// is `view(ctx, params) → HTMLElement` (it may fill itself asynchronously),
// with ctx = {api, h, me, navigate, toast, client} as app.js builds it and
// params the path's :names.
//
// Menu entries marked admin are shown only to users whose role is admin;
// the admin routes themselves stay reachable by anyone who types the path,
// and the server's 403 "Access denied" is what a non-admin sees there.

import { renderNewConv } from "./views/newconv.js";
import { renderMembers } from "./views/members.js";
import { renderExports } from "./views/export.js";
import { renderAdminUsers, renderAdminAudit, renderAdminConvs } from "./views/admin.js";

/** @type {Array<{path: string, view: Function}>} */
export const routes = [
  { path: "/new", view: renderNewConv },
  { path: "/c/:id/members", view: renderMembers },
  { path: "/exports", view: renderExports },
  { path: "/admin/users", view: renderAdminUsers },
  { path: "/admin/audit", view: renderAdminAudit },
  { path: "/admin/convs", view: renderAdminConvs },
];

/** @type {Array<{label: string, path: string, admin?: boolean}>} */
export const menu = [
  { label: "New conversation", path: "/new" },
  { label: "Export", path: "/exports" },
  // One entry for the three admin screens (they link each other), so the
  // top bar stays short at 360 px.
  { label: "Admin", path: "/admin/users", admin: true },
];
