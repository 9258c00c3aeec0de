// What reaches Material's search worker. Loaded before Material's bundle (theme/overrides/main.html),
// so that the worker the bundle creates is the one defined here. Which pages it searches is decided at build
// time: each language has its own index (theme/hooks/search_per_language.py).

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

const PageWorker = window.Worker;
window.Worker = class extends PageWorker {
  postMessage(message, ...rest) {
    if (message && message.type === 2 && typeof message.data === "string") {  // 2: a query
      message = { ...message, data: searchQuery(message.data) };
    }
    super.postMessage(message, ...rest);
  }
};
