// views/confirm.js asks before a destructive action: an in-page modal
// <dialog> (never window.confirm, which blocks the page and cannot be
// styled or translated) with a title, a sentence, Cancel and a button that
// names the action ("Remove ben"). Cancel has the focus, so Enter or a
// stray click does not destroy anything; Escape cancels. The caller gives
// every string, translated.

/**
 * confirmDialog shows the question and answers whether the user chose ok.
 * The dialog is removed from the page once answered.
 * @param {Function} h dom.js h
 * @param {{title: string, body?: string, ok: string, cancel: string}} opts
 * @returns {Promise<boolean>}
 */
export function confirmDialog(h, opts) {
  return new Promise((resolve) => {
    const back = document.activeElement;
    let answer = false;
    const ok = h("button", { type: "button", class: "m-danger", "data-test": "confirm-ok" }, opts.ok);
    const cancel = h("button", { type: "button", "data-test": "confirm-cancel" }, opts.cancel);
    const title = h("h2", { class: "confirm-title", id: "confirm-title" }, opts.title);
    const body = opts.body ? h("p", { id: "confirm-body" }, opts.body) : null;
    const dlg = h("dialog", {
      class: "confirm", "data-test": "confirm", "aria-labelledby": "confirm-title",
      "aria-describedby": body ? "confirm-body" : null,
    }, title, body, h("div", { class: "confirm-actions" }, cancel, ok));
    ok.addEventListener("click", () => {
      answer = true;
      dlg.close();
    });
    cancel.addEventListener("click", () => dlg.close());
    // Escape fires cancel, then close: the answer stays false.
    dlg.addEventListener("close", () => {
      dlg.remove();
      if (back && back.isConnected && typeof back.focus === "function") back.focus();
      resolve(answer);
    });
    document.body.appendChild(dlg);
    dlg.showModal();
    cancel.focus();
  });
}
