// What reaches Material's search worker. Loaded before Material's bundle (theme/overrides/main.html),
// so that the worker the bundle creates is the one defined here.

// Material reads the query on keyup only. Text that arrives without a key release (committed Hangul,
// paste, voice, autofill) was never searched: forward each input event on the box as a keyup.
document.addEventListener("input", (event) => {
  const box = event.target;
  if (box instanceof HTMLInputElement && box.matches("[data-md-component=search-query]")) {
    box.dispatchEvent(new KeyboardEvent("keyup"));
  }
});

// Korean particles (조사) attach to the noun: "파이프라인을" is "파이프라인" + "을". The index holds the forms
// the pages use, and Material matches word prefixes, so search the noun. A stripped word is a prefix of
// the typed one: this only widens a search, it never loses a match.
const PARTICLES = ["에서", "으로", "까지", "부터", "에게", "처럼", "보다", "을", "를", "이", "가", "은", "는",
  "의", "에", "로", "와", "과", "도", "만"];
const HANGUL_WORD = /^[\uAC00-\uD7A3]+$/;

function searchQuery(query) {
  return query.split(/(\s+)/).map((word) => {
    if (!HANGUL_WORD.test(word)) return word;
    const particle = PARTICLES.find((p) => word.endsWith(p) && word.length - p.length >= 2);
    return particle ? word.slice(0, -particle.length) : word;
  }).join("");
}
window.searchQuery = searchQuery;  // the browser tests read the query actually sent

// One search index serves every language (mkdocs-static-i18n builds one for the whole site), so a query typed on
// the Korean site also finds the English pages, and an error message (the same English text on both pages of the
// error index) may find the other language's entry first. Keep the results in the reader's language: a page's
// language is the first folder of its path under the site root when that folder is a language the header's
// language selector offers, else the default language (at the root).
function languageOf(url, root, langs) {
  const path = url.pathname.startsWith(root.pathname) ? url.pathname.slice(root.pathname.length) : "";
  const folder = path.split("/")[0];
  return langs.includes(folder) ? folder : "";
}

function keepReadersLanguage(result) {
  const config = document.getElementById("__config");
  const langs = [...document.querySelectorAll("a.md-select__link[hreflang]")].map((a) => a.hreflang);
  if (!config || !Array.isArray(result?.items) || !langs.length) return;
  const root = new URL(JSON.parse(config.textContent).base, window.location.href);
  const mine = languageOf(new URL(window.location.href), root, langs);
  const kept = result.items.filter((group) => languageOf(new URL(group[0].location, root), root, langs) === mine);
  result.items.splice(0, result.items.length, ...kept);
}

const PageWorker = window.Worker;
window.Worker = class extends PageWorker {
  constructor(...args) {
    super(...args);
    // Registered before Material's own listener: Material renders the filtered list.
    this.addEventListener("message", (event) => keepReadersLanguage(event.data?.data));
  }

  postMessage(message, ...rest) {
    if (message && message.type === 2 && typeof message.data === "string") {  // 2: a query
      message = { ...message, data: searchQuery(message.data) };
    }
    super.postMessage(message, ...rest);
  }
};
