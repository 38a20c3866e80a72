// Small behaviours every page may use, without inline script (the Content-Security-Policy
// allows scripts from labgov's own static files only):
//   <form data-confirm="End this role today?">  asks before submitting;
//   <select data-autosubmit>                      submits its form when changed;
//   <button class="menu-toggle" aria-controls=…>  opens and closes the menu on narrow screens;
//   a region htmx replaced after a click or a submit gets the keyboard focus (typing in a
//   field keeps it: the estimate beside the request form is announced, not focused);
//   a table wider than its box scrolls inside it and can be scrolled with the keyboard.
(function () {
  "use strict";
  document.documentElement.classList.add("js");
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
  document.addEventListener("click", function (event) {
    var toggle = event.target.closest && event.target.closest(".menu-toggle");
    if (!toggle) return;
    var header = toggle.closest("header");
    var open = header.classList.toggle("menu-open");
    toggle.setAttribute("aria-expanded", open ? "true" : "false");
  });
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape") return;
    var header = document.querySelector("header.top.menu-open");
    if (!header) return;
    header.classList.remove("menu-open");
    var toggle = header.querySelector(".menu-toggle");
    toggle.setAttribute("aria-expanded", "false");
    toggle.focus();
  });

  function scrollableTables(root) {
    var tables = (root || document).querySelectorAll("table");
    for (var i = 0; i < tables.length; i++) {
      var table = tables[i];
      if (table.scrollWidth > table.clientWidth + 1) {
        table.setAttribute("tabindex", "0");
      } else if (table.getAttribute("tabindex") === "0") {
        table.removeAttribute("tabindex");
      }
    }
  }
  document.addEventListener("DOMContentLoaded", function () { scrollableTables(); });
  window.addEventListener("resize", function () { scrollableTables(); });

  // What started each request travels with its own XMLHttpRequest, so a panel that loads by
  // itself while a click's request is in flight never takes the click's focus.
  document.addEventListener("htmx:beforeRequest", function (event) {
    var source = event.detail.requestConfig && event.detail.requestConfig.triggeringEvent;
    if (event.detail.xhr) event.detail.xhr.labgovTrigger = source ? source.type : null;
  });
  document.addEventListener("htmx:afterSettle", function (event) {
    scrollableTables();
    var trigger = event.detail.xhr && event.detail.xhr.labgovTrigger;
    if (trigger !== "click" && trigger !== "submit") return;
    var target = event.detail.target;
    // An outerHTML swap replaced the target: focus what now stands under its id.
    if (target && !target.isConnected && target.id) target = document.getElementById(target.id);
    if (!target || target === document.body) return;
    if (!target.hasAttribute("tabindex")) target.setAttribute("tabindex", "-1");
    target.focus({ preventScroll: false });
  });
})();
