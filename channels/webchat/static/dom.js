// Herald web chat: how the panels (runs.js, jobs.js) build their elements, in one place.
// Vanilla JS, no build step. Text goes into the page only as text nodes, never parsed as HTML.
(() => {
  "use strict";

  // A <tag> of class className (none when empty) holding children: elements, or strings
  // (as text nodes).
  function el(tag, className, ...children) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    node.append(...children);
    return node;
  }

  // A <button type="button"> of class className showing text (none yet when omitted).
  function button(className, text) {
    const made = text ? el("button", className, text) : el("button", className);
    made.type = "button";
    return made;
  }

  window.HeraldDom = { el, button };
})();
