// Behaviour the templates ask for with data attributes, so no page needs inline JavaScript
// (the Content-Security-Policy allows scripts from this site only):
//   <form data-confirm="Sure?" data-confirm-label="Release">  asks in a dialog before submitting;
//   <form data-disable-on-submit="#id">    disables that button once submitted;
//   <select data-autosubmit>               submits its form when changed;
//   <button data-print>                    prints the page;
//   <button data-copy="#id" data-copied-label="Copied">  copies that element's text.
// Listeners sit on the document (capture phase), so content HTMX swaps in behaves the same.
// A form refused with its errors answers 422 with itself re-rendered: HTMX swaps it in too.
(function () {
  document.addEventListener("htmx:beforeSwap", function (event) {
    if (event.detail.xhr.status === 422) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!(form instanceof HTMLFormElement)) return;
    if (form.dataset.confirm && form.dataset.confirmed !== "yes") {
      event.preventDefault();
      event.stopImmediatePropagation();
      confirmThen(form, event.submitter);
      return;
    }
    delete form.dataset.confirmed;
    if (form.dataset.disableOnSubmit) {
      var button = form.querySelector(form.dataset.disableOnSubmit);
      if (button) button.disabled = true;
    }
  }, true);
  // The page's confirmation dialog (base.html); the browser's own where it is missing.
  function confirmThen(form, submitter) {
    var dialog = document.getElementById("confirm-dialog");
    function go() {
      form.dataset.confirmed = "yes";
      if (form.requestSubmit) form.requestSubmit(submitter || undefined); else form.submit();
    }
    if (!dialog || !window.bootstrap) {
      if (window.confirm(form.dataset.confirm)) go();
      return;
    }
    var ok = document.getElementById("confirm-dialog-ok");
    document.getElementById("confirm-dialog-message").textContent = form.dataset.confirm;
    ok.textContent = form.dataset.confirmLabel || ok.dataset.defaultLabel;
    var modal = window.bootstrap.Modal.getOrCreateInstance(dialog);
    ok.onclick = function () {
      ok.onclick = null;
      modal.hide();
      go();
    };
    modal.show();
  }
  document.addEventListener("change", function (event) {
    var field = event.target;
    if (field.matches && field.matches("select[data-autosubmit]") && field.form) field.form.submit();
  });
  document.addEventListener("click", function (event) {
    var target = event.target.closest && event.target.closest("[data-print]");
    if (target) window.print();
  });
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("[data-copy]");
    if (!button) return;
    var source = document.querySelector(button.dataset.copy);
    if (!source) return;
    var text = source.textContent.trim();
    function copied() {
      if (!button.dataset.copyLabel) button.dataset.copyLabel = button.textContent;
      button.textContent = button.dataset.copiedLabel || button.dataset.copyLabel;
      setTimeout(function () { button.textContent = button.dataset.copyLabel; }, 2000);
    }
    function select() {  // no clipboard API (plain HTTP): select the text for Ctrl+C
      var range = document.createRange();
      range.selectNodeContents(source);
      var selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      try { if (document.execCommand("copy")) copied(); } catch (error) { /* left selected */ }
    }
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(copied, select);
    } else {
      select();
    }
  });
})();
