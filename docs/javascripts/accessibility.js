// What the rendered page needs for keyboards and screen readers (WCAG 2.1 A/AA; tests/test_every_page.py runs
// axe-core on every page):
// - a box that scrolls and holds nothing focusable (a wide table on a phone, a notebook cell, a calculator's script)
//   takes keyboard focus, so arrow keys can scroll it (WCAG 2.1.1). Material does this for its code blocks only, and
//   not on devices without hover (phones, where a keyboard can still be attached);
// - a code annotation's marker, a link with no text of its own, is named "Annotation 1" (WCAG 2.4.4, 4.1.2);
// - a task list's checkbox is named by its item's text (WCAG 4.1.2).
// Material adds tables' scroll wrappers and annotation markers after load, and the calculators rewrite their results:
// the fixes run again after every change to the page and every resize.
(() => {
  const ko = document.documentElement.lang === "ko";
  const SCROLLERS = ".md-content :is(pre, pre > code, table, .md-typeset__scrollwrap, .highlight-ipynb, .jp-OutputArea-output)";
  const FOCUSABLE = "a[href], button, input, select, textarea, [tabindex]";
  const MARK = "data-scroll-focus";

  function scrolls(el) {
    const style = getComputedStyle(el);
    const x = /auto|scroll/.test(style.overflowX) && el.scrollWidth > el.clientWidth + 1;
    const y = /auto|scroll/.test(style.overflowY) && el.scrollHeight > el.clientHeight + 1;
    return x || y;
  }

  function focusScrollers() {
    for (const el of document.querySelectorAll(SCROLLERS)) {
      const ours = el.hasAttribute(MARK);
      if (el.hasAttribute("tabindex") && !ours) continue; // Material's code blocks, where it makes them focusable
      if (scrolls(el) && !el.querySelector(FOCUSABLE)) {
        if (el.getAttribute("tabindex") !== "0") el.setAttribute(MARK, ""), el.setAttribute("tabindex", "0");
      } else if (ours) {
        el.removeAttribute(MARK), el.removeAttribute("tabindex");
      }
    }
  }

  function nameAnnotations() {
    for (const a of document.querySelectorAll(".md-annotation__index:not([aria-label])")) {
      const id = a.querySelector("[data-md-annotation-id]")?.dataset.mdAnnotationId;
      if (id) a.setAttribute("aria-label", `${ko ? "주석" : "Annotation"} ${id}`);
    }
  }

  function nameTaskCheckboxes() {
    for (const box of document.querySelectorAll(".task-list-item input[type=checkbox]:not([aria-label])")) {
      const item = box.closest(".task-list-item").cloneNode(true);
      item.querySelectorAll("ul, ol").forEach((list) => list.remove());
      box.setAttribute("aria-label", item.textContent.replace(/\s+/g, " ").trim().slice(0, 160));
    }
  }

  let queued = false;
  function schedule() {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => {
      queued = false;
      focusScrollers();
      nameAnnotations();
      nameTaskCheckboxes();
    });
  }

  addEventListener("resize", schedule);
  // Material takes the focus off a code block on devices without hover (phones): give it back
  new MutationObserver(schedule).observe(document.body, { childList: true, subtree: true, attributeFilter: ["tabindex"] });
  schedule();
})();
