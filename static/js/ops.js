// A refused inline action answers 422 with its row (or form) and the reason: show it.
document.addEventListener("htmx:beforeSwap", function (event) {
  if (event.detail.xhr.status === 422) {
    event.detail.shouldSwap = true;
    event.detail.isError = false;
  }
});
