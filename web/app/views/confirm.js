// views/confirm.js owns the in-page confirmation of destructive actions: a
// modal <dialog> (showModal: the rest of the page is inert) whose focus
// starts on Cancel, so Enter alone never destroys anything; Escape and
// Cancel answer false, only the OK button true. The caller gives every
// string (already translated): this module shows no text of its own.

/**
 * confirmDialog asks the user to confirm and resolves once they answered.
 * @param {Function} h dom.js h
 * @param {{title: string, body?: string, ok: string, cancel: string}} texts
 * @returns {Promise<boolean>}
 */
export function confirmDialog(h, { title, body, ok, cancel }) {
  return new Promise((resolve) => {
    let yes = false;
    const id = "confirm-" + Math.random().toString(36).slice(2);
    const cancelBtn = h("button", { type: "button", "data-test": "confirm-cancel", on: { click: () => dlg.close() } }, cancel);
    const okBtn = h("button", { type: "button", class: "primary danger", "data-test": "confirm-ok", on: { click: () => { yes = true; dlg.close(); } } }, ok);
    const dlg = h("dialog", { class: "confirm", "data-test": "confirm", "aria-labelledby": id + "-t", "aria-describedby": body ? id + "-b" : false },
      h("h2", { id: id + "-t" }, title),
      body ? h("p", { id: id + "-b" }, body) : null,
      h("div", { class: "confirm-actions" }, cancelBtn, okBtn));
    dlg.addEventListener("close", () => {
      dlg.remove();
      resolve(yes);
    });
    document.body.appendChild(dlg);
    dlg.showModal();
    cancelBtn.focus();
  });
}
