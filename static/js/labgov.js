// Small behaviours every page may use, without inline script (the Content-Security-Policy
// allows scripts from labgov's own static files only):
//   <form data-confirm="End this role today?">  asks before submitting;
//   <select data-autosubmit>                      submits its form when changed.
(function () {
  "use strict";
  document.addEventListener("submit", function (event) {
    var message = event.target.getAttribute && event.target.getAttribute("data-confirm");
    if (message && !window.confirm(message)) event.preventDefault();
  }, true);
  document.addEventListener("change", function (event) {
    var field = event.target;
    if (field.hasAttribute && field.hasAttribute("data-autosubmit") && field.form) {
      field.form.requestSubmit ? field.form.requestSubmit() : field.form.submit();
    }
  });
})();
